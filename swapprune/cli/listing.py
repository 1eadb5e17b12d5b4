"""``swapprune list``: the registered names (criteria, policies, strategies, merges, runtimes, tasks)."""

from __future__ import annotations

from swapprune.edit.merging import MERGES
from swapprune.engine.orders import PROBES
from swapprune.evaluation.names import ALIASES, NATIVE_TASKS, PACK_DIR
from swapprune.serving.rules import RUNTIME_VERSIONS, RUNTIMES


def add_arguments(p) -> None:
    pass


def run(args) -> int:
    from swapprune.select import criteria  # imports numpy
    from swapprune.select.constraints import NONE  # imports numpy
    from swapprune.select.spec import AUTO, AUTO_SOURCE, AUTO_WHAT  # imports numpy
    from swapprune.select.strategies import describe as describe_strategies  # imports numpy

    crit = criteria.describe()
    strategies = [
        (spec, _phrase(what.split(": ", 1)[1] if what.startswith("``") and ": " in what else what))
        for spec, what in describe_strategies()
    ]
    runtimes = [*RUNTIMES, NONE]
    # One name column for every table, as wide as the longest name and two spaces.
    width = 2 + max(len(n) for n in [*(c[0] for c in crit), AUTO, *(s for s, _ in strategies)])
    width = max(width, 2 + max(map(len, runtimes)))
    print("criteria (--protocol), lower importance = more removable:")
    for name, source, what in crit:
        print(f"  {name:<{width}}{what}" + (f" [{source}]" if source else ""))
    print("policies (--protocol):")
    print(f"  {AUTO:<{width}}{AUTO_WHAT} [{AUTO_SOURCE}]")
    print("strategies (--strategy):")
    for spec, what in strategies:
        print(f"  {spec:<{width}}{what}")
    print("merge rules (--merge): " + ", ".join(MERGES.names()))
    print("serving runtimes (--serve; the serving view in the model card):")
    for name, artifact in RUNTIMES.items():
        print(
            f"  {name:<{width}}reads the {artifact} file [rules read from {RUNTIME_VERSIONS[name]}]"
        )
    print(f"  {NONE:<{width}}no in-phase constraint")
    print("probes (score --probes): " + ", ".join(PROBES))
    tasks = sorted(set(NATIVE_TASKS) | {p.stem for p in PACK_DIR.glob("*.yaml")})
    print("evaluation tasks (--tasks): " + ", ".join(tasks))
    print("task aliases: " + ", ".join(f"{k}={v}" for k, v in sorted(ALIASES.items())))
    return 0


def _phrase(text: str) -> str:
    """A docstring's first sentence as the list's other descriptions read: a lower-case
    phrase without the full stop."""
    return (text[:1].lower() + text[1:]).removesuffix(".")
