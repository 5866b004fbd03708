"""bench/place_plan.py refuses bad input in one line (exit 2) and writes nothing: a missing or
malformed plan file, a plan without reuse factors, a model that does not load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "bench" / "place_plan.py"
MODEL = ROOT / "src" / "modelcircuit" / "data" / "digits_cnn.onnx"


@pytest.mark.parametrize("case", ["missing", "not json", "no plan", "bad model"])
def test_bad_input_is_one_line_and_nothing_written(tmp_path, case):
    plan = tmp_path / "plan.json"
    model = MODEL
    if case == "not json":
        plan.write_text("{not json")
    elif case == "no plan":
        plan.write_text(json.dumps({"fit": {"device": "ecp5-85k"}}))
    elif case == "bad model":
        plan.write_text(json.dumps({"plan": {"node": 4}}))
        model = tmp_path / "nothing.onnx"
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(SCRIPT), str(model), str(plan), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.stderr
    assert ("plan" in lines[0]) if case != "bad model" else ("nothing.onnx" in lines[0])
    assert not out.exists()
