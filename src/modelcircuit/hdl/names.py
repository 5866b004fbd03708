"""Identifiers for the generated Verilog: model names are sanitised so that no keyword or
illegal character can break the output."""

from __future__ import annotations

import re

from .errors import HdlError

VERILOG_KEYWORDS = frozenset("""
always and assign automatic begin buf bufif0 bufif1 case casex casez cell cmos config deassign
default defparam design disable edge else end endcase endconfig endfunction endgenerate
endmodule endprimitive endspecify endtable endtask event for force forever fork function
generate genvar highz0 highz1 if ifnone incdir include initial inout input instance integer
join large liblist library localparam macromodule medium module nand negedge nmos nor
noshowcancelled not notif0 notif1 or output parameter pmos posedge primitive pull0 pull1
pulldown pullup pulsestyle_onevent pulsestyle_ondetect rcmos real realtime reg release repeat
rnmos rpmos rtran rtranif0 rtranif1 scalared showcancelled signed small specify specparam
strong0 strong1 supply0 supply1 table task time tran tranif0 tranif1 tri tri0 tri1 triand
trior trireg unsigned use uwire vectored wait wand weak0 weak1 while wire wor xnor xor
logic bit byte int shortint longint string class struct union enum typedef
""".split())

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def sanitize(name: str, max_len: int = 40) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", str(name)).strip("_")
    s = re.sub(r"_+", "_", s)[:max_len] or "x"
    if s[0].isdigit():
        s = "n" + s
    return s + "_" if s.lower() in VERILOG_KEYWORDS else s


def instance_name(index: int, node_name: str) -> str:
    """Unique per node (the index), readable (the sanitised name)."""
    return f"u{index}_{sanitize(node_name)}"


def check_top_name(name: str) -> str:
    if not isinstance(name, str) or not _IDENT.match(name) or name.lower() in VERILOG_KEYWORDS \
            or len(name) > 64:
        raise HdlError(f"top-level name {name!r} is not a valid Verilog module name (letters, "
                       "digits, '_', not starting with a digit, not a keyword)")
    return name
