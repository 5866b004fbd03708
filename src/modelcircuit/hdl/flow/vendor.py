"""Vendor projects for AMD (Vivado) and Intel (Quartus) parts: `modelcircuit export`.

The project folder (written atomically, util/atomic.atomic_dir):

    hdl/<top>.v            the AXI IP (hdl/axi.py) with the model inside: one Verilog file
    hdl/<top>.json         ports, packing, latency, II, the AXI layout and register map
    constraints/<top>.xdc  (Vivado) or <top>.sdc (Quartus): the clock on `aclk`
    <top>.tcl, Makefile …  the vendor project, written by edalize (Vivado: its flow API;
                           Quartus: its tool API, edalize has no Quartus flow), not by hand
    ip/component.xml       (Vivado) IP-XACT (IEEE 1685-2009, Vivado IP packager layout:
    ip/hdl/<top>.v         add `ip/` to the IP repository and the core appears in the
                           block design with its s_axis, m_axis, s_axil, aclk, aresetn)
    driver/<top>_driver.py a PYNQ-style driver: pack/unpack (numpy only) and DMA
                           send/receive of packed vectors
    export.json            what was written and for what (graph id, vendor, part, clock)

Nothing here runs Vivado or Quartus: they are not on the machines that build this project
(README "Deploying on AMD/Intel parts" says what was never run). Beat widths: by default
each direction's TDATA is the largest power of two of at most 8 bytes that divides its token
(hdl.axi.dma_beat_bytes: AXI DMA widths, no TKEEP, no padding); `axis_bytes` forces one width
for both.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from ...util import templating
from ...util.atomic import atomic_dir
from ..axi import REGISTERS, AxiLayout, convert_axi
from .tools import FlowError

VENDORS = ("vivado", "quartus")
TOP = "modelcircuit_axi"
_VIVADO_PART = re.compile(r"^xc[a-z0-9]+(-[a-z0-9]+)+$", re.I)  # e.g. xczu3eg-sbva484-1-e
_QUARTUS_PART = re.compile(r"^[0-9a-z]{4,}$", re.I)  # e.g. 5CSEMA5F31C6, 10M50DAF484C7G
# Quartus needs the family by name: part number prefixes (Intel's ordering codes)
QUARTUS_FAMILIES = (("AG", "Agilex 7"), ("1S", "Stratix 10"), ("10AX", "Arria 10"),
                    ("10AS", "Arria 10"), ("10AT", "Arria 10"), ("10CL", "Cyclone 10 LP"),
                    ("10CX", "Cyclone 10 GX"), ("10M", "MAX 10"), ("5CE", "Cyclone V"),
                    ("5CG", "Cyclone V"), ("5CS", "Cyclone V"), ("5A", "Arria V"),
                    ("5S", "Stratix V"), ("EP4CE", "Cyclone IV E"), ("EP4CGX", "Cyclone IV GX"))


def check_request(vendor: str, part: str, clock_mhz: float) -> str | None:
    """FlowError for a bad vendor, part or clock; returns the Quartus family (else None)."""
    if vendor not in VENDORS:
        raise FlowError(f"unknown --vendor {vendor!r}; known: {', '.join(VENDORS)}")
    if not (0 < clock_mhz <= 1000):
        raise FlowError(f"--clock-mhz {clock_mhz:g}: need a clock in (0, 1000] MHz")
    if vendor == "vivado":
        if not _VIVADO_PART.match(part or ""):
            raise FlowError(f"--part {part!r} is not an AMD part number (e.g. "
                            "xczu3eg-sbva484-1-e, xc7z020clg400-1)")
        return None
    if not _QUARTUS_PART.match(part or ""):
        raise FlowError(f"--part {part!r} is not an Intel part number (e.g. 5CSEMA5F31C6)")
    for prefix, fam in QUARTUS_FAMILIES:
        if part.upper().startswith(prefix):
            return fam
    raise FlowError(f"--part {part!r}: unknown Intel family; known prefixes: "
                    + ", ".join(p for p, _ in QUARTUS_FAMILIES))


def render(name: str, **ctx: Any) -> str:
    return templating.render("vendor", name, **ctx)


def export_project(compiled: Any, vendor: str, part: str, out: Path | str,
                   clock_mhz: float = 200.0, reuse: Any = None,
                   axis_bytes: int | None = None) -> dict[str, Any]:
    """Write the project folder (module docstring) into `out`; returns export.json's
    content. FlowError (exit 2) for a bad vendor, part, clock or beat width."""
    family = check_request(vendor, part, clock_mhz)
    if axis_bytes is not None and not (1 <= axis_bytes <= 128):
        raise FlowError(f"--axis-bytes {axis_bytes}: need 1 to 128")
    from .fit import plan_circuit

    beats = "dma" if axis_bytes is None else axis_bytes
    verilog, info = convert_axi(compiled, plan_circuit(compiled, reuse), TOP, beats)
    layout = AxiLayout.from_info(info, beats)
    return atomic_dir(Path(out), lambda d: _write(d, compiled, vendor, part, family,
                                                  clock_mhz, verilog, info, layout))


def _write(d: Path, compiled: Any, vendor: str, part: str, family: str | None,
           clock_mhz: float, verilog: str, info: dict[str, Any], layout: AxiLayout
           ) -> dict[str, Any]:
    period = round(1000.0 / clock_mhz, 3)
    files: dict[str, str] = {
        f"hdl/{TOP}.v": verilog,
        f"hdl/{TOP}.json": json.dumps(info, indent=1, sort_keys=True, default=str) + "\n",
        f"driver/{TOP}_driver.py": render("driver.py.j2", top=TOP, graph_id=compiled.graph_id,
                                          model=str(getattr(compiled.graph, "name", "")),
                                          input=layout.input.as_dict(),
                                          output=layout.output.as_dict(),
                                          input_frac=int(info["input"]["frac_bits"]),
                                          output_frac=int(info["output"]["frac_bits"]),
                                          registers=REGISTERS,
                                          id_words=info["axi"]["graph_id_words"],
                                          host=host_parts(compiled)),
    }
    cons = f"constraints/{TOP}.{'xdc' if vendor == 'vivado' else 'sdc'}"
    files[cons] = render("clock.sdc.j2", period=period, clock_mhz=clock_mhz)
    if vendor == "vivado":
        files["ip/component.xml"] = render("component.xml.j2", top=TOP, ports=_ports(info),
                                           layout=layout, registers=_register_docs(),
                                           graph_id=compiled.graph_id, clock_mhz=clock_mhz,
                                           model=str(getattr(compiled.graph, "name", "")))
        files[f"ip/hdl/{TOP}.v"] = verilog
        files["ooc.tcl"] = render("vivado_ooc.tcl.j2")
    for rel, text in files.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8", newline="\n")
    _edalize(d, vendor, part, family, cons)
    written = sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())
    rep = {"graph_id": compiled.graph_id, "vendor": vendor, "part": part,
           "family": family, "clock_mhz": clock_mhz, "top": TOP,
           "axi": {"input": layout.input.as_dict(), "output": layout.output.as_dict()},
           "latency": info.get("latency"), "ii": info.get("ii"), "files": written,
           "host": host_parts(compiled),
           "never_run": f"{vendor} itself: the project, IP-XACT file and driver were "
                        "generated and checked here without the vendor tools or a board"}
    (d / "export.json").write_text(json.dumps(rep, indent=1, sort_keys=True) + "\n")
    return rep


def host_parts(compiled: Any) -> dict[str, list[str]]:
    """The model's host parts around the circuit (graphs/host.py), as "Op(node)" lists: the
    head (an NCHW Transpose, a QuantizeLinear's float scaling) runs before the IP's input
    codes, the tail (a float scale and bias after the last integer op) after its output."""
    return {k: [f"{n.op}({n.name})" for n in part.nodes] if part is not None else []
            for k, part in (("head", getattr(compiled, "head", None)),
                            ("tail", getattr(compiled, "tail", None)))}


def _edalize(d: Path, vendor: str, part: str, family: str | None, cons: str) -> None:
    """The vendor project files, by edalize (its warnings about a missing Quartus go to
    the log, not to the user's terminal)."""
    logging.getLogger("edalize").setLevel(logging.ERROR)
    src = [{"name": f"hdl/{TOP}.v", "file_type": "verilogSource"}]
    if vendor == "vivado":
        from edalize.flows.vivado import Vivado

        edam = {"name": TOP, "toplevel": TOP,
                "files": src + [{"name": cons, "file_type": "xdc"},
                                {"name": "ooc.tcl", "file_type": "tclSource"}],
                "flow_options": {"part": part}}
        Vivado(edam, str(d)).configure()
    else:
        from edalize.edatool import get_edatool

        edam = {"name": TOP, "toplevel": TOP, "files": src + [{"name": cons, "file_type": "SDC"}],
                "tool_options": {"quartus": {"family": family, "device": part.upper()}}}
        get_edatool("quartus")(edam=edam, work_root=str(d), verbose=False).configure()


def _ports(info: dict[str, Any]) -> list[dict[str, Any]]:
    """(name, direction, width) of the AXI IP's ports, in a fixed order."""
    ax = info["axi"]
    li, lo = ax["input"], ax["output"]
    width = {"s_axis_tdata": 8 * li["beat_bytes"], "m_axis_tdata": 8 * lo["beat_bytes"],
             "s_axis_tkeep": li["beat_bytes"], "m_axis_tkeep": lo["beat_bytes"],
             "s_axil_awaddr": ax["address_bits"], "s_axil_araddr": ax["address_bits"],
             "s_axil_awprot": 3, "s_axil_arprot": 3, "s_axil_wdata": 32, "s_axil_wstrb": 4,
             "s_axil_bresp": 2, "s_axil_rdata": 32, "s_axil_rresp": 2}
    outs = {"s_axis_tready", "m_axis_tdata", "m_axis_tvalid", "m_axis_tlast", "m_axis_tkeep",
            "s_axil_awready", "s_axil_wready", "s_axil_bresp", "s_axil_bvalid",
            "s_axil_arready", "s_axil_rdata", "s_axil_rresp", "s_axil_rvalid"}
    return [{"name": p, "direction": "out" if p in outs else "in", "width": width.get(p, 1)}
            for p in ax["ports"]]


def _register_docs() -> list[dict[str, Any]]:
    access = {"ERROR": "read-write", "PACKET_FRAMES": "read-write"}
    doc = {"LATENCY": "cycles from input to output (compile time)",
           "II": "cycles between inputs (compile time)",
           "FRAMES_IN": "frames accepted", "FRAMES_OUT": "frames sent",
           "ERROR": "bit 0 TLAST early, bit 1 TLAST missing; write 1 to clear",
           "PACKET_FRAMES": "frames per TLAST packet (0 counts as 1)",
           "LAYOUT": "beat bytes [7:0], input lane bits [15:8], output lane bits [23:16]",
           "TOKENS": "input tokens per frame [15:0], output [31:16]"}
    for i in range(4):
        doc[f"GRAPH_ID{i}"] = f"graph id word {i} (sha256 hex digits {8 * i}..{8 * i + 7})"
    return [{"name": n, "offset": a, "access": access.get(n, "read-only"), "doc": doc[n]}
            for n, a in REGISTERS.items()]
