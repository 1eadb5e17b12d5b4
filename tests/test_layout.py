"""The package's shape: its import graph, its layers, module sizes, light checks.

The import graph counts every import a module holds: at the top, inside functions and
under ``if TYPE_CHECKING:``. A type-only import never runs, but a circle held apart
only by it (or by an import placed inside a function) is still a circle: it has no
cycle at all. Two layers are held to their side of it:

* ``swapprune/config/`` is a schema (fields, types, ranges, choices among fixed names)
  and imports nothing of the package outside itself but two leaf modules:
  :mod:`swapprune.errors` and :mod:`swapprune.defaults`, where the constants its fields
  name live (the probe names, the matched contract's size, the bootstrap count, the
  calibration defaults), which the stages read from there or through their own modules.
  Checks that need a registry, the disk, the hub, a package or the model's facts are in
  ``swapprune/pipeline/checks.py``.
* ``swapprune/cli/`` is the top: nothing outside it imports it (but ``__main__``, its
  entry point). Lower layers return data (a configuration, a
  :class:`~swapprune.pipeline.stages.NextCut`, an error's
  :class:`~swapprune.errors.Fix`) and the CLI writes it as a command line.

An import placed inside a function must delay something: a heavy package (:data:`HEAVY`)
or a module of the package that imports one at its top. Every other import belongs at the
module's top.

Every check has a self-test that builds a violating case and shows it is caught.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "swapprune"

#: What ``swapprune/config/`` may import of the package besides itself: two leaf modules.
CONFIG_MAY_IMPORT = ("swapprune.errors", "swapprune.defaults")
#: The CLI's entry point, the one module outside ``cli/`` that imports it.
CLI_ENTRY = ("swapprune.__main__",)


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(package: Path) -> dict[str, Path]:
    return {_module_name(p, package): p for p in package.rglob("*.py")}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its body.

    Imports inside functions and under ``if TYPE_CHECKING:`` are edges like any other.
    ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``.
    """
    mods = _modules(package)
    root = package.name
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
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
                if t and t != name and (t == root or t.startswith(root + ".")):
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


def _inside(module: str, folder: str) -> bool:
    return module == folder or module.startswith(folder + ".")


def outside_imports(graph: dict[str, set[str]], folder: str, allowed: tuple[str, ...]) -> list:
    """``(module, imported)`` edges from ``folder`` to anything but itself and ``allowed``."""
    return sorted(
        (m, n)
        for m, deps in graph.items()
        if _inside(m, folder)
        for n in deps
        if not _inside(n, folder) and not any(_inside(n, a) for a in allowed)
    )


def imports_into(graph: dict[str, set[str]], folder: str, allowed: tuple[str, ...]) -> list:
    """``(module, imported)`` edges into ``folder`` from outside it (but ``allowed``)."""
    return sorted(
        (m, n)
        for m, deps in graph.items()
        if not _inside(m, folder) and m not in allowed
        for n in deps
        if _inside(n, folder)
    )


def test_no_import_cycle_lazy_and_type_only_imports_included():
    cycle = find_cycle(_package_parents_dropped(import_graph()))
    assert cycle is None, " -> ".join(cycle or [])


def test_config_is_a_schema_that_imports_no_domain():
    bad = outside_imports(import_graph(), "swapprune.config", CONFIG_MAY_IMPORT)
    assert not bad, f"config/ imports outside itself: {bad}"


def test_nothing_outside_cli_imports_cli():
    bad = imports_into(import_graph(), "swapprune.cli", CLI_ENTRY)
    assert not bad, f"imports of cli/ from below it: {bad}"


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def _package(root: Path, files: dict[str, str]) -> Path:
    """A package ``root/swapprune`` of ``files`` (path -> source), each folder a package."""
    pkg = root / "swapprune"
    for rel, source in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in path.relative_to(pkg).parents:
            init = pkg / folder / "__init__.py"
            if not init.exists():
                init.write_text("")
        path.write_text(source)
    return pkg


TYPE_ONLY = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    {}\n"
IN_FUNCTION = "def f():\n    {}\n"


def test_a_circle_through_a_type_only_import_is_found(tmp_path):
    pkg = _package(
        tmp_path,
        {
            "select/spec.py": TYPE_ONLY.format("from swapprune.select.adaptive import Settings"),
            "select/adaptive.py": IN_FUNCTION.format("from swapprune.select import reference"),
            "select/reference.py": "from swapprune.select.spec import Spec\n",
        },
    )
    graph = import_graph(pkg)
    assert "swapprune.select.adaptive" in graph["swapprune.select.spec"]  # type-only: an edge
    cycle = find_cycle(_package_parents_dropped(graph))
    assert cycle is not None and set(cycle) == {
        "swapprune.select.spec",
        "swapprune.select.adaptive",
        "swapprune.select.reference",
    }


def test_a_config_module_importing_the_domain_is_caught(tmp_path):
    pkg = _package(
        tmp_path,
        {
            "errors.py": "",
            "defaults.py": "",
            "select/spec.py": "",
            "model/facts.py": "",
            "config/fields.py": "from swapprune.errors import SwappruneError\n"
            "from swapprune.defaults import N_BOOT\nfrom swapprune.config import run\n",
            "config/run.py": TYPE_ONLY.format("from swapprune.model.facts import ModelFacts"),
            "config/select.py": IN_FUNCTION.format("from swapprune.select.spec import build"),
        },
    )
    bad = outside_imports(import_graph(pkg), "swapprune.config", CONFIG_MAY_IMPORT)
    assert bad == [
        ("swapprune.config.run", "swapprune.model.facts"),
        ("swapprune.config.select", "swapprune.select.spec"),
    ]


def test_an_import_of_cli_from_below_it_is_caught(tmp_path):
    pkg = _package(
        tmp_path,
        {
            "cli/argv.py": "",
            "cli/summary.py": "from swapprune.cli import argv\n",
            "__main__.py": "from swapprune.cli import argv\n",
            "pipeline/stages.py": IN_FUNCTION.format("from swapprune.cli.argv import QUICK"),
            "select/reuse.py": TYPE_ONLY.format("import swapprune.cli.argv"),
        },
    )
    bad = imports_into(import_graph(pkg), "swapprune.cli", CLI_ENTRY)
    assert bad == [
        ("swapprune.pipeline.stages", "swapprune.cli.argv"),
        ("swapprune.select.reuse", "swapprune.cli.argv"),
    ]


#: Third-party packages that are slow to import or optional: an import placed inside a
#: function may wait for one of them, or for a module of the package that imports one.
HEAVY = (
    "torch",
    "transformers",
    "lm_eval",
    "peft",
    "optimum",
    "matplotlib",
    "accelerate",
    "safetensors",
    "gguf",
    "numpy",
    "datasets",
    "llmcompressor",
    "tqdm",
    "yaml",
    "huggingface_hub",
)
#: Imports inside functions that delay nothing heavy, each kept for a cycle: ``(module,
#: imported)`` -> why. engine/scores.py imports select/regime.py at its top, and so runs
#: select/__init__.py, which imports adaptive and stability (through reference).
KEPT_FOR_A_CYCLE = {
    ("swapprune.select.adaptive", "swapprune.engine.scores"): "engine.scores -> select",
    ("swapprune.select.stability", "swapprune.engine.scores"): "engine.scores -> select",
}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _lazy_names(path: Path) -> dict[str, str]:
    """A package's ``_LAZY = {name: module}``: the names its ``__getattr__`` imports."""
    for s in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(s, ast.Assign) and any(getattr(t, "id", "") == "_LAZY" for t in s.targets):
            return ast.literal_eval(s.value)
    return {}


def _loaded_by(node, name: str, is_pkg: bool, mods, lazy) -> list[str]:
    """What an import statement loads: package modules (and the packages above them, whose
    ``__init__`` runs first) and third-party modules by their dotted names."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = name.split(".") if is_pkg else name.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        for a in node.names:
            full = f"{base}.{a.name}"
            names.append(full if full in mods else lazy.get(base, {}).get(a.name, base))
    out = []
    for t in names:
        if t.split(".")[0] != PACKAGE.name:
            out.append(t)
            continue
        while t and t not in mods:
            t = t.rpartition(".")[0]
        parts = t.split(".")
        out.extend(".".join(parts[: i + 1]) for i in range(len(parts)))
    return out


def heavy_at_import(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the heavy third-party modules (dotted, as written) that importing it imports:
    its top-level imports (not those inside functions or under ``if TYPE_CHECKING:``),
    followed through the package's own modules."""
    mods = _modules(package)
    lazy = {m: _lazy_names(p) for m, p in mods.items() if p.name == "__init__.py"}
    loads: dict[str, list[str]] = {}
    for name, path in mods.items():
        found: list[str] = []

        def walk(stmts, name=name, path=path, found=found):
            for s in stmts:
                if isinstance(s, (ast.Import, ast.ImportFrom)):
                    found.extend(_loaded_by(s, name, path.name == "__init__.py", mods, lazy))
                elif isinstance(s, ast.If):
                    walk([] if _is_type_checking(s.test) else s.body)
                    walk(s.orelse)
                elif isinstance(s, ast.Try):
                    walk(s.body + [x for h in s.handlers for x in h.body] + s.orelse)
                    walk(s.finalbody)
                elif isinstance(s, (ast.With, ast.ClassDef)):
                    walk(s.body)

        walk(ast.parse(path.read_text(encoding="utf-8")).body)
        loads[name] = found
    heavy = {
        m: {t for t in ts if t not in mods and t.split(".")[0] in HEAVY} for m, ts in loads.items()
    }
    changed = True
    while changed:
        changed = False
        for m, ts in loads.items():
            for t in ts:
                if t in heavy and t != m and not heavy[t] <= heavy[m]:
                    heavy[m] |= heavy[t]
                    changed = True
    return heavy


def _optional(node, parents) -> bool:
    """Inside a ``try`` whose handler catches ImportError: an optional package."""
    p = parents.get(node)
    while p is not None:
        if isinstance(p, ast.Try) and any(
            h.type is not None and "ImportError" in ast.unparse(h.type) for h in p.handlers
        ):
            return True
        p = parents.get(p)
    return False


def function_imports(package: Path = PACKAGE):
    """Each import inside a function, as ``(module, node, source line, waits, exempt)``:
    ``waits`` the heavy packages (top-level names) it waits for that the module has not
    imported already; ``exempt`` when it is optional (inside a ``try`` that catches
    ImportError) or kept for a cycle (:data:`KEPT_FOR_A_CYCLE`)."""
    mods = _modules(package)
    lazy = {m: _lazy_names(p) for m, p in mods.items() if p.name == "__init__.py"}
    heavy = heavy_at_import(package)
    for name, path in sorted(mods.items()):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        tree = ast.parse(source)
        parents = {c: n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
        seen: set[int] = set()
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in seen:
                    continue
                seen.add(id(node))
                loaded = _loaded_by(node, name, path.name == "__init__.py", mods, lazy)
                waits: set[str] = set()
                for t in loaded:
                    if t in mods:
                        waits |= heavy[t] - heavy[name]
                    elif t.split(".")[0] in HEAVY and t not in heavy[name]:
                        waits.add(t)
                kept = any((name, t) in KEPT_FOR_A_CYCLE for t in loaded)
                exempt = kept or _optional(node, parents)
                tops = {w.split(".")[0] for w in waits}
                yield name, node, lines[node.lineno - 1], tops, exempt


def imports_that_delay_nothing(package: Path = PACKAGE) -> list[str]:
    """``module:line: import`` for each import inside a function that waits for no heavy
    package (what it imports, the module has imported already or is light), but those
    inside a ``try`` that catches ImportError and those of :data:`KEPT_FOR_A_CYCLE`."""
    return [
        f"{name}:{node.lineno}: {ast.unparse(node)}"
        for name, node, _line, waits, exempt in function_imports(package)
        if not waits and not exempt
    ]


def imports_without_their_reason(package: Path = PACKAGE) -> list[str]:
    """``module:line: import`` for each import inside a function whose line does not say
    why in a comment naming a heavy package it waits for (``# imports torch``)."""
    bad = []
    for name, node, line, waits, exempt in function_imports(package):
        if exempt or not waits:
            continue
        _code, hash_, comment = line.partition("#")
        if not hash_ or not any(re.search(rf"\b{w}\b", comment) for w in waits):
            bad.append(
                f"{name}:{node.lineno}: {line.strip()} (waits for {', '.join(sorted(waits))})"
            )
    return bad


def test_imports_inside_functions_only_delay_a_heavy_package():
    bad = imports_that_delay_nothing()
    assert not bad, "imports inside functions that delay nothing (move them to the top):\n" + (
        "\n".join(bad)
    )


def test_each_import_inside_a_function_says_what_it_delays():
    bad = imports_without_their_reason()
    assert not bad, "imports inside functions without '# imports <package>':\n" + "\n".join(bad)


def test_an_import_without_its_reason_is_caught(tmp_path):
    pkg = _package(
        tmp_path,
        {
            "model/stack.py": "import torch\n",
            "select/core.py": IN_FUNCTION.format("from swapprune.model.stack import y")
            + IN_FUNCTION.replace("f()", "g()").format("import torch  # imports torch")
            + IN_FUNCTION.replace("f()", "h()").format("import numpy  # a reason, not the name"),
        },
    )
    assert imports_without_their_reason(pkg) == [
        "swapprune.select.core:2: from swapprune.model.stack import y (waits for torch)",
        "swapprune.select.core:6: import numpy  # a reason, not the name (waits for numpy)",
    ]


def test_an_import_inside_a_function_that_delays_nothing_is_caught(tmp_path):
    pkg = _package(
        tmp_path,
        {
            "errors.py": "",
            "model/stack.py": "import torch\n",
            "stats/boot.py": "import numpy as np\n",
            "select/core.py": "import numpy as np\n"
            + IN_FUNCTION.format("from swapprune.stats.boot import x")
            + IN_FUNCTION.replace("f()", "g()").format("from swapprune.model.stack import y")
            + IN_FUNCTION.replace("f()", "h()").format("import numpy"),
            "plan.py": IN_FUNCTION.format("from swapprune.stats import boot")
            + IN_FUNCTION.replace("f()", "g()").format("from swapprune.errors import E")
            + "def h():\n    try:\n        import fcntl\n    except ImportError:\n        pass\n",
        },
    )
    assert imports_that_delay_nothing(pkg) == [
        "swapprune.plan:4: from swapprune.errors import E",
        "swapprune.select.core:3: from swapprune.stats.boot import x",
        "swapprune.select.core:7: import numpy",
    ]


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
    """pipeline.checks.check() on a local model's config.json, in a fresh process: the budget
    against the depth is checked, and refused in one line, without torch."""
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
from swapprune.errors import SwappruneError
cfg.prune.budget = 40
try:
    checks.check(cfg)
    raise AssertionError("a budget of 40 blocks of 6 was accepted")
except SwappruneError as e:
    assert "budget 40" in str(e) and "\\n" not in str(e), e
bad = [m for m in ("torch", "transformers", "lm_eval") if m in sys.modules]
assert not bad, bad
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
