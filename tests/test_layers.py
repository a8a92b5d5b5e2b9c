"""The house's shape: imports flow one way through four layers with no cycle, the metrics never load torch, and no
product file outgrows a reader (450 lines).

Layers (README "Design"): 1 data (`lmms_eval_tasks` but its lmms-eval glue) <- 2 glue (`lmms_eval_tasks.tasks`,
`evaluation_hooks`, `discovery`) <- 3 `model_adapters` <- 4 `visdep_metrics`. Every import counts, function-local
ones included: they hide a dependency from the reader, not from the interpreter.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.imports import heavy_modules_loaded

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("lmms_eval_tasks", "model_adapters", "visdep_metrics")
GLUE = {"lmms_eval_tasks.tasks", "lmms_eval_tasks.evaluation_hooks", "lmms_eval_tasks.discovery"}
MAX_LINES = 450


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules `path` imports anywhere in its body (`from a.b import c` counts a.b.c when that is a
    module, else a.b)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def layer(module: str) -> int:
    if module.startswith("visdep_metrics"):
        return 4
    if module.startswith("model_adapters"):
        return 3
    if module in GLUE:
        return 2
    return 1


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name, set(modules)) for name, path in modules.items()}


def test_imports_flow_down_the_layers(graph):
    upward = sorted(f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)})"
                    for a, targets in graph.items() for b in targets if layer(b) > layer(a))
    assert not upward, "\n".join(upward)


def test_no_import_cycle(graph):
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "\n".join(cycles)


def test_the_metrics_do_not_load_torch():
    modules = sorted(m for m in _modules() if m.startswith(("visdep_metrics.audit", "visdep_metrics.tst"))
                     and m != "visdep_metrics.tst.llm")  # TsT-LLM fine-tunes a model: torch is its job
    assert heavy_modules_loaded(modules, heavy=("torch",)) == [], "importing the audit and TsT modules loaded torch"


def test_no_product_file_outgrows_a_reader():
    long = {name: n for name, path in _modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"


def test_the_walk_sees_function_local_imports(tmp_path):
    """The check can fail: a module that imports another inside a function is seen to depend on it."""
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    from visdep_metrics.audit import compute\n    import model_adapters.presentation\n")
    assert _imports(path, "lmms_eval_tasks.probe", set(_modules())) == {"visdep_metrics.audit.compute",
                                                                           "model_adapters.presentation"}
