"""The adder graphs solved side by side (hdl/plan/cmvm_ahead.py): the same export as solved
in turn, and really solved in the worker processes."""

from __future__ import annotations

import pytest

from modelcircuit.api import compile as mc_compile
from modelcircuit.data import DEFAULT_MODEL, bundled, load_model
from modelcircuit.hdl.export import convert
from modelcircuit.hdl.plan import cmvm, cmvm_ahead


@pytest.fixture(scope="module")
def digits_da():  # noqa: ANN201
    return mc_compile(load_model(str(bundled(DEFAULT_MODEL))), precision="fixed<8,3>",
                      strategy="da")


def test_side_by_side_is_the_same_export(digits_da, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv(cmvm_ahead.JOBS_ENV, "1")
    v1, il1, _ = convert(digits_da, pipeline="fmax")
    monkeypatch.setenv(cmvm_ahead.JOBS_ENV, "2")
    monkeypatch.setattr(cmvm_ahead, "MIN_WEIGHTS", 0)
    real = cmvm.optimize
    here: list[bool] = []  # the cse flag of every call made in this process

    def counted(*a, **k):  # noqa: ANN002, ANN003, ANN202
        here.append(k.get("cse", a[6] if len(a) > 6 else True))
        return real(*a, **k)

    monkeypatch.setattr(cmvm, "optimize", counted)
    v2, il2, _ = convert(digits_da, pipeline="fmax")
    assert v2 == v1 and il2 == il1
    # here: only the stand-ins (no sharing); every real graph came from a worker
    assert len(here) >= 2 and not any(here)


def test_in_turn_when_asked_or_small(digits_da, monkeypatch) -> None:  # noqa: ANN001
    calls: list[bool] = []
    real = cmvm.optimize
    monkeypatch.setattr(cmvm, "optimize",
                        lambda *a, **k: calls.append(k.get("cse", True)) or real(*a, **k))
    monkeypatch.setenv(cmvm_ahead.JOBS_ENV, "1")
    convert(digits_da, pipeline="fmax")
    n = len(calls)
    assert n >= 2 and all(calls)  # one real call per layer, no stand-in
    monkeypatch.setenv(cmvm_ahead.JOBS_ENV, "2")
    monkeypatch.setattr(cmvm_ahead, "MIN_WEIGHTS", 10**9)  # too small to pay: in turn
    convert(digits_da, pipeline="fmax")
    assert len(calls) == 3 * n and all(calls[2 * n:])  # stand-ins, then the real ones


@pytest.mark.parametrize("env,want", [("3", 3), ("1", 1), ("0", None), ("x", None), ("", None)])
def test_jobs_env(monkeypatch, env: str, want: int | None) -> None:  # noqa: ANN001
    monkeypatch.setenv(cmvm_ahead.JOBS_ENV, env)
    n = cmvm_ahead.jobs()
    if want is None:  # ignored: the idle cores, at least 1
        from modelcircuit.graphs.threads import cores_given
        assert 1 <= n <= cores_given()
    else:
        assert n == want
