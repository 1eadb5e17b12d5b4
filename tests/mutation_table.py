"""The mutation table of ``make mutation``: per module, killed / total / equivalent / time.

Reads mutmut's per-file records (``mutants/**/*.py.meta``: each mutant's exit
code, and its test time; mutmut 3.8 records none, so the time is its estimate,
the summed duration of the tests each mutant runs) and the hand-checked list of
equivalent survivors, ``tests/mutation_equivalent.txt`` (one ``mutant-name
reason`` per line: mutants that change no behaviour, so no test can kill them).
The score is killed over total less equivalent; a timeout counts as killed (the
mutant hung the tests).

    python tests/mutation_table.py [mutants] [--only PATTERNS]

``--only PATTERNS``: a file of mutant-name patterns (fnmatch, one per line, ``#``
comments), such as ``tests/mutation_decisions.txt``: the table is then per function,
over the mutants those patterns name (``make mutation-decisions``).
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections import Counter
from pathlib import Path

KILLED = {1, 3, 36, 24, -24, 152, 255, -11, -9}  # killed, pytest error, timeouts, crashes
SURVIVED, NO_TESTS, NOT_CHECKED = 0, {5, 33}, None
EQUIVALENT = Path(__file__).with_name("mutation_equivalent.txt")


def equivalent() -> dict[str, str]:
    """The listed equivalent mutants, by name, with the reason given."""
    out = {}
    if EQUIVALENT.is_file():
        for line in EQUIVALENT.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                name, _, why = line.strip().partition(" ")
                out[name] = why.strip()
    return out


def patterns(path: Path) -> list[str]:
    """The mutant-name patterns of a ``--only`` file."""
    lines = (ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines())
    return [ln for ln in lines if ln]


def _group(name: str, module: str, only: list[str] | None) -> str | None:
    """The row a mutant counts in: its module, or with ``only`` its function (``None`` when
    ``only`` does not name it)."""
    if only is None:
        return module
    if not any(fnmatch.fnmatch(name, p) for p in only):
        return None
    head, _, fn = name.split("__mutmut_")[0].rpartition(".")
    fn = fn[2:] if fn.startswith("x_") else fn[1:].strip("\u01c1").replace("\u01c1", ".")
    return f"{head}.{fn}"


def table(root: Path, only: list[str] | None = None) -> tuple[list[str], list[str]]:
    """The table's lines, and the survivors not listed as equivalent."""
    eq = equivalent()
    rows = ["| module | killed | total | equivalent | survived | no tests | score | test s |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    unexplained = []
    groups: dict[str, Counter] = {}
    seconds_by: dict[str, float] = {}
    for meta in sorted(root.rglob("*.py.meta")):
        record = json.loads(meta.read_text())
        codes = record["exit_code_by_key"]
        module = meta.relative_to(root).as_posix().removesuffix(".meta")
        # mutmut 3.8 leaves durations_by_key at 0; its estimate is the summed duration of
        # the tests each mutant runs, from the stats pass.
        took = record.get("durations_by_key", {})
        est = record.get("estimated_durations_by_key", {})
        for name, code in codes.items():
            key = _group(name, module, only)
            if key is None:
                continue
            c = groups.setdefault(key, Counter())
            c["total"] += 1
            seconds = took.get(name) or est.get(name) or 0.0
            seconds_by[key] = seconds_by.get(key, 0.0) + float(seconds)
            if code in KILLED:
                c["killed"] += 1
            elif code == SURVIVED and name in eq:
                c["equivalent"] += 1
            elif code == SURVIVED:
                c["survived"] += 1
                unexplained.append(name)
            elif code in NO_TESTS:
                c["no tests"] += 1
            elif code is NOT_CHECKED:
                c["not checked"] += 1
            else:
                c["other"] += 1
    total = Counter()
    for key, c in groups.items():
        total.update(c)
        rows.append(_row(key, c, seconds_by[key]))
    if only is not None and groups:
        rows.append(_row("**all of these**", total, sum(seconds_by.values())))
    return rows, unexplained


def _row(key: str, c: Counter, seconds: float) -> str:
    scored = c["total"] - c["equivalent"]
    score = f"{100 * c['killed'] / scored:.1f}%" if scored else "-"
    if c["not checked"]:
        score += f" ({c['not checked']} not run)"
    return (
        f"| {key} | {c['killed']} | {c['total']} | {c['equivalent']} | {c['survived']} | "
        f"{c['no tests']} | {score} | {seconds:.0f} |"
    )


def main() -> int:
    args = sys.argv[1:]
    only = None
    if "--only" in args:
        i = args.index("--only")
        only = patterns(Path(args[i + 1]))
        del args[i : i + 2]
    root = Path(args[0] if args else "mutants")
    if not root.is_dir():
        print(f"no {root}/: run `make mutation` first", file=sys.stderr)
        return 2
    rows, unexplained = table(root, only)
    print("\n".join(rows))
    if unexplained:
        print(f"\n{len(unexplained)} survivor(s) not listed as equivalent "
              "(`mutmut show NAME` shows one):")  # fmt: skip
        print("\n".join(f"  {n}" for n in unexplained))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
