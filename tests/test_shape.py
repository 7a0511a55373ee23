"""The code keeps its shape: imports point down the layers, no import cycle, no function too complex.

The layers, lowest first (the brief's order: records -> readers and models -> counting -> rules and
pipelines -> engine -> orchestration -> api and cli; aggregates -> report -> cli). A module may import
modules of its own layer or a lower one; lazy imports inside functions count too (they are still a
dependency), `if TYPE_CHECKING:` imports do not. The graph has no cycle at all, not even inside a layer.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "vlmlint"

LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "vlmlint.records", "vlmlint.fileio", "vlmlint.templates", "vlmlint.template_env", "vlmlint.report.safe",
        "vlmlint.version",
    ),
    ("vlmlint.readers", "vlmlint.models", "vlmlint.images", "vlmlint.image_header", "vlmlint.media", "vlmlint.video"),
    ("vlmlint.template_cache", "vlmlint.counting"),
    ("vlmlint.rules", "vlmlint.pipelines"),
    ("vlmlint.aggregate",),
    ("vlmlint.report",),
    ("vlmlint.config", "vlmlint.settings"),
    # The process pool sits beside the engine: Scanner.scan hands a --jobs scan to runner.scan_parallel,
    # and the runner builds its workers from the parent's class without importing the engine.
    ("vlmlint.engine", "vlmlint.checker", "vlmlint.runner"),
    (
        "vlmlint.ray_engine", "vlmlint.executors", "vlmlint.verify", "vlmlint.session",
        "vlmlint.stats", "vlmlint.checkpoint", "vlmlint.baseline",
    ),
    ("vlmlint.api", "vlmlint.cli", "vlmlint.docs", "vlmlint"),
)  # fmt: skip


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def layer_of(module: str) -> int:
    """The layer of the longest prefix that names one (vlmlint.report.safe before vlmlint.report)."""
    best, found = -1, None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), index
    if found is None:
        raise AssertionError(f"{module} is in no layer: add it to tests/test_shape.py LAYERS")
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for child in ast.walk(node))
    return skipped


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The vlmlint modules `module` imports, at module level or lazily in a function."""
    tree = ast.parse(path.read_text())
    skipped = _type_checking_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            targets = [source] + [f"{source}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        # A parent package (`from vlmlint import aggregate`) is imported before any module in it anyway.
        found.update(t for t in targets if t in known and not module.startswith(t + ".") and t != module)
    return found


def import_graph() -> dict[str, set[str]]:
    names = module_names()
    known = set(names)
    return {module: imports_of(module, path, known) for module, path in names.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_module_has_a_layer():
    for module in module_names():
        layer_of(module)


def test_imports_point_down_the_layers():
    upward = [
        f"{module} (layer {layer_of(module) + 1}) imports {target} (layer {layer_of(target) + 1})"
        for module, targets in sorted(import_graph().items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_records_import_nothing_of_vlmlint():
    assert import_graph()["vlmlint.records"] == set()


def test_the_layer_test_sees_a_cycle_and_an_upward_import():
    graph = {"vlmlint.engine": {"vlmlint.runner"}, "vlmlint.runner": {"vlmlint.engine"}}
    assert cycles(graph) == [["vlmlint.engine", "vlmlint.runner"]]
    assert layer_of("vlmlint.report.safe") < layer_of("vlmlint.report.html") < layer_of("vlmlint.engine")


@pytest.mark.skipif(
    shutil.which("ruff") is None and not (Path(sys.executable).parent / "ruff").exists(), reason="ruff"
)
def test_no_function_is_too_complex():
    """ruff's C901 / PLR0912 / PLR0915 with the limits of pyproject.toml, over the whole package."""
    ruff = Path(sys.executable).parent / "ruff"
    command = [
        str(ruff) if ruff.exists() else "ruff",
        "check",
        "--select",
        "C901,PLR0912,PLR0915",
        str(PACKAGE),
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=PACKAGE.parent)
    assert result.returncode == 0, result.stdout + result.stderr
