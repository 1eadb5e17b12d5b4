"""``swapprune list``: the registered names (criteria, strategies, merge rules, probes, tasks)."""

from __future__ import annotations


def add_arguments(p) -> None:
    pass


def run(args) -> int:
    from swapprune import criteria
    from swapprune.config import PROBES
    from swapprune.evaluation.names import ALIASES, NATIVE_TASKS, PACK_DIR
    from swapprune.merging import MERGES

    print("criteria (--protocol), lower importance = more removable:")
    describe = getattr(criteria, "describe", None)
    if describe is not None:
        for name, source, what in describe():
            print(f"  {name:<16} {what}" + (f" [{source}]" if source else ""))
    else:
        print("  " + ", ".join(criteria.names()))
    print("strategies (--strategy):")
    from swapprune.selection import describe as describe_strategies

    for spec, what in describe_strategies():
        what = what.split(": ", 1)[1] if what.startswith("``") and ": " in what else what
        print(f"  {spec:<16} {what}")
    print("merge rules (--merge): " + ", ".join(MERGES.names()))
    print("probes (score --probes): " + ", ".join(PROBES))
    tasks = sorted(set(NATIVE_TASKS) | {p.stem for p in PACK_DIR.glob("*.yaml")})
    print("evaluation tasks (--tasks): " + ", ".join(tasks))
    print("task aliases: " + ", ".join(f"{k}={v}" for k, v in sorted(ALIASES.items())))
    return 0
