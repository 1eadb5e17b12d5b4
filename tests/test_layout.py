"""The package's shape: no import cycle (lazy imports included), small modules, light checks."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "swapprune"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its body (functions included).

    ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``.
    Imports under ``if TYPE_CHECKING:`` are skipped: they never run.
    """
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names
                ]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name and t.startswith("swapprune"):
                    graph[name].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n) :] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def _package_parents_dropped(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    # Importing a submodule runs its package's __init__ first; an __init__ that imports its
    # own submodules (to register plugins) is not a cycle through them.
    return {m: {n for n in deps if not m.startswith(n + ".")} for m, deps in graph.items()}


def test_no_import_cycle_lazy_imports_included():
    cycle = find_cycle(_package_parents_dropped(import_graph()))
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


#: One concept per module; past this many lines a module is probably holding two.
SOFT_CEILING = 600


def test_module_sizes():
    """One concept per module: none past the soft ceiling, and most of them small."""
    sizes = {p: len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    big = {str(p.relative_to(PACKAGE)): n for p, n in sizes.items() if n > SOFT_CEILING}
    assert not big, f"modules past {SOFT_CEILING} lines (split by concept): {big}"
    ordered = sorted(sizes.values())
    median = ordered[len(ordered) // 2]
    assert median <= 200, f"median module has {median} lines"


def test_checking_a_run_imports_neither_torch_nor_transformers(tmp_path):
    """pipeline.checks.check() (the budget against the depth) on a local model's config.json,
    in a fresh process."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(
        '{"model_type": "llama", "num_hidden_layers": 6, "max_position_embeddings": 256,'
        ' "hidden_size": 32}'
    )
    code = f"""
import sys
from swapprune.pipeline import checks
from swapprune.config import CalibrationConfig, ModelConfig, RunConfig, SelectConfig
cfg = RunConfig(model=ModelConfig({str(tmp_path / "m")!r}), prune=SelectConfig(budget=2),
                calibration=CalibrationConfig(tokens=64))
checked = checks.check(cfg)
assert checked.facts.num_layers == 6 and checked.selection.budget == 2
bad = [m for m in ("torch", "transformers", "lm_eval") if m in sys.modules]
assert not bad, bad
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
