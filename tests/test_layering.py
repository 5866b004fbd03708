"""Layering, read from the source with `ast` (imports inside functions included):

- util/ imports nothing of the project;
- graphs/ imports util/ only (and itself);
- frontend/ imports graphs/ and util/ only;
- hdl/ and gpu_backend/ import graphs/ and util/ only (and themselves);
- sim/ may import graphs/, hdl/, gpu_backend/, util/ (and itself);
- nothing under graphs|hdl|gpu_backend|sim imports cli, api or the top-level package;
- inside hdl/, the circuit (plan/, units/, vector/, streamed/ and the rest) never imports
  the flow;
- no import cycle anywhere (between modules; a package counts as its __init__), imports
  under `if TYPE_CHECKING:` included (a type-only cycle is still two modules that cannot be
  read apart);
- no `_private` name imported from another module.

The checker is tested on a synthetic package too, so that it is seen to fail.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
LAYERS = {"util": {"util"}, "graphs": {"graphs", "util"},
          "frontend": {"frontend", "graphs", "util"},
          "hdl": {"graphs", "hdl", "util"}, "gpu_backend": {"graphs", "gpu_backend", "util"},
          "sim": {"graphs", "hdl", "gpu_backend", "sim", "util"}}
TOP_ONLY = {"cli", "api", ""}  # "" = the top-level package's __init__
# hdl/: the flow (tools, reports, boards, fit to a device, the build) vs the circuit (the rest)
HDL_FLOW = {"flow"}


def module_files(src: Path, package: str) -> dict[str, Path]:
    out = {}
    for p in sorted((src / package).rglob("*.py")):
        rel = p.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def imports(mods: dict[str, Path], type_only: bool = False) -> dict[str, set[str]]:
    """module -> project modules it imports (a `from pkg import name` names the submodule
    pkg.name where that is a module, else the package). `type_only`: imports under
    `if TYPE_CHECKING:` too."""
    edges: dict[str, set[str]] = {}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        pkg = mod if is_pkg else mod.rsplit(".", 1)[0]
        deps: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        for node in (ast.walk(tree) if type_only else _runtime_nodes(tree)):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    deps.add(sub if sub in mods else target)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        edges[mod] = {d for d in deps if d in mods and d != mod}
    return edges


def _runtime_nodes(tree: ast.AST):  # noqa: ANN202 - a generator of nodes
    """Every node but those under `if TYPE_CHECKING:` (annotations only, never imported)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                todo.extend(child.orelse)
            else:
                todo.append(child)


def layer_of(mod: str, root: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == root else ""


def violations(src: Path, root: str) -> list[str]:
    mods = module_files(src, root)
    edges = imports(mods)
    bad = []
    for mod, deps in edges.items():
        layer = layer_of(mod, root)
        for d in sorted(deps):
            dl = layer_of(d, root)
            if layer in LAYERS:
                if dl in TOP_ONLY or (dl not in LAYERS[layer] and f"{root}.{dl}" in mods):
                    bad.append(f"{mod} imports {d} ({layer}/ may import "
                               f"{', '.join(sorted(LAYERS[layer]))} only)")
            if layer == "hdl" and dl == "hdl":
                mine, theirs = mod.split(".")[2:3], d.split(".")[2:3]
                if (not mine or mine[0] not in HDL_FLOW) and theirs and theirs[0] in HDL_FLOW:
                    bad.append(f"{mod} imports {d} (the circuit never imports the flow)")
    bad += [f"import cycle: {' -> '.join(c)}" for c in cycles(imports(mods, type_only=True))]
    bad += private_imports(mods)
    return bad


def private_imports(mods: dict[str, Path]) -> list[str]:
    """`from module import _name` across modules: a private name read from outside."""
    bad = []
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                if (a.name.startswith("_") and not a.name.startswith("__") and target in mods
                        and f"{target}.{a.name}" not in mods):
                    bad.append(f"{mod} imports the private {a.name} from {target}")
    return bad


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each as a path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_project_layering() -> None:
    bad = violations(SRC, "modelcircuit")
    assert not bad, "\n".join(bad)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


CLEAN = {"pkg/__init__.py": "from .api import run\n",
         "pkg/api.py": "from .graphs import ir\n\ndef run():\n    from .sim import verify\n",
         "pkg/cli.py": "from . import api\n",
         "pkg/graphs/__init__.py": "", "pkg/graphs/ir.py": "",
         "pkg/graphs/passes/__init__.py": "", "pkg/graphs/passes/fuse.py": "from ..ir import x\n",
         "pkg/hdl/__init__.py": "", "pkg/hdl/top.py": "from ..graphs.ir import Graph\n",
         "pkg/hdl/flow/__init__.py": "", "pkg/hdl/flow/fit.py": "from ..top import Top\n",
         "pkg/gpu_backend/__init__.py": "from .codegen import program\n",
         "pkg/gpu_backend/codegen.py": "from ..graphs import ir\n",
         "pkg/sim/__init__.py": "", "pkg/sim/verify.py": "from .. import hdl, gpu_backend\n"}


@pytest.mark.parametrize("extra,expect", [
    ({"pkg/graphs/ir.py": "def f():\n    from ..hdl import top\n"}, "graphs/ may import graphs"),
    ({"pkg/graphs/ir.py": "from .. import api\n"}, "pkg.graphs.ir imports pkg.api"),
    ({"pkg/hdl/top.py": "from ..gpu_backend import codegen\n"}, "hdl/ may import"),
    ({"pkg/gpu_backend/codegen.py": "import pkg.hdl.top\n"}, "gpu_backend/ may import"),
    ({"pkg/sim/verify.py": "from ..cli import main\n"}, "pkg.sim.verify imports pkg.cli"),
    ({"pkg/sim/verify.py": "import pkg\n"}, "pkg.sim.verify imports pkg "),
    ({"pkg/hdl/top.py": "def f():\n    from .flow.fit import plan\n"}, "never imports the flow"),
    ({"pkg/graphs/passes/fuse.py": "from .. import ir\n",
      "pkg/graphs/ir.py": "def f():\n    from .passes import fuse\n"}, "import cycle"),
    ({"pkg/gpu_backend/codegen.py": "from . import program\n"}, "import cycle"),
    ({"pkg/graphs/passes/fuse.py": "from ..ir import x\nfrom typing import TYPE_CHECKING\n"
                                   "if TYPE_CHECKING:\n    from .. import ir\n",
      "pkg/graphs/ir.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                          "    from .passes import fuse\n"}, "import cycle"),
    ({"pkg/hdl/flow/fit.py": "from ..top import _plan\n"}, "imports the private _plan"),
])
def test_checker_sees_forbidden_imports(tmp_path: Path, extra: dict[str, str], expect: str) -> None:
    _write(tmp_path, CLEAN)
    assert violations(tmp_path, "pkg") == []
    _write(tmp_path, extra)
    bad = violations(tmp_path, "pkg")
    assert any(expect in b for b in bad), bad


def test_checker_reads_the_real_tree() -> None:
    mods = module_files(SRC, "modelcircuit")
    assert {"modelcircuit.graphs.ir", "modelcircuit.cli", "modelcircuit.hdl"} <= set(mods)
    assert "modelcircuit.graphs.ir" in imports(mods)["modelcircuit.graphs.reference"]
    assert os.sep not in "".join(mods)
