"""The package's import graph keeps the layering of ARCHITECTURE.md: no cycles, lower layers never
import higher ones, no module over 500 lines. Read from the source (AST), imports inside functions
included; imports under ``if TYPE_CHECKING:`` are annotations only and do not count."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "jaxdebate"
MAX_LINES = 500

# ARCHITECTURE.md's layers, bottom first; a unit (sub-package or top-level module) may import its own
# layer and the ones below.
LAYERS = (
    ("errors", "configlib", "processes", "workdir_lock", "distributed", "host_memory", "shapes", "schedules", "stats", "jsonl", "metrics",
     "checkpointer", "validation_files"),
    ("model", "data", "shaping"),
    ("sampling",),
    ("debate",),
    ("rl",),
    ("config",),
    ("checkpoint", "train", "eval", "launch", "transcripts", "analysis", "sweep_runs", "sweep_plots", "sweep_stats", "sweep_report", "run_endpoints", "run_items", "answer_profile",
     "sweep_plan", "sweep", "sweep_server", "pilot", "provenance",
     "coherence", "jaxdebate"),
)
LAYER_OF = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("jaxdebate",) + path.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(tree: ast.AST):
    """Every ``jaxdebate...`` name imported anywhere in ``tree`` except under ``if TYPE_CHECKING``."""
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("jaxdebate"):
            yield from (f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("jaxdebate"))
        todo.extend(ast.iter_child_nodes(node))


def _graph() -> dict[str, set[str]]:
    """module -> the jaxdebate modules it imports (``from pkg import name`` resolves to pkg.name when
    that is a module, else to pkg)."""
    modules = _modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for target in _imported(ast.parse(path.read_text(), str(path))):
            while target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges[name].add(target)
    return edges


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph as a path, or None (iterative DFS with colours)."""
    state: dict[str, int] = {}
    for start in sorted(edges):
        if state.get(start):
            continue
        stack = [(start, iter(sorted(edges.get(start, ()))))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                return path[path.index(child):] + [child]
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(edges.get(child, ())))))
    return None


def test_no_module_cycles():
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()) or [])


def test_no_package_cycles_and_layers_import_downwards():
    units: dict[str, set[str]] = defaultdict(set)
    for a, targets in _graph().items():
        units[_unit(a)].update(_unit(b) for b in targets if _unit(b) != _unit(a))
    unknown = sorted(set(units) - set(LAYER_OF))
    assert not unknown, f"place {unknown} in a layer of ARCHITECTURE.md and of LAYERS here"
    upward = sorted((a, b) for a, bs in units.items() for b in bs if LAYER_OF[b] > LAYER_OF[a])
    assert not upward, f"imports from a higher layer: {upward}"
    cycle = _cycle(units)
    assert cycle is None, " -> ".join(cycle)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_small(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(PACKAGE.parent)} has {n} lines (> {MAX_LINES}): split it"


def test_the_checker_sees_a_cycle_and_an_upward_import():
    """The graph code itself: a known cycle is found, a known acyclic graph is not flagged."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    assert "jaxdebate.data.config" in _graph()["jaxdebate.config"]


SERVER_PACKAGES = ("__future__", "vllm", "torch", "safetensors")  # vLLM and what it installs itself


def test_in_server_modules_import_only_the_standard_library_and_vllm():
    """``sampling/vllm/in_server/`` runs inside the vLLM server's virtualenv (copied onto its
    PYTHONPATH one file at a time): jaxdebate, its dependencies and its sibling files are not there."""
    directory = PACKAGE / "sampling" / "vllm" / "in_server"
    modules = [p for p in directory.glob("*.py") if p.name != "__init__.py"]
    assert len(modules) == 3
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path.name}: relative import"
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in SERVER_PACKAGES, f"{path.name} imports {name}"


def test_tests_mirror_the_package():
    """A module's tests are found by its path: every folder under tests/ is a package of jaxdebate."""
    tests = Path(__file__).resolve().parent
    folders = [p for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__"]
    assert folders, "tests/ has no package folders"
    strays = [str(p.relative_to(tests)) for p in folders
              if not (PACKAGE / p.relative_to(tests) / "__init__.py").is_file()]
    assert not strays, f"tests/ folders with no jaxdebate package of that path: {strays}"
