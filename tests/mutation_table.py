"""The mutation table of ``make mutation``: per module, killed / total / equivalent / time.

Reads mutmut's per-file records (``mutants/**/*.py.meta``: each mutant's exit
code, and its test time; mutmut 3.8 records none, so the time is its estimate,
the summed duration of the tests each mutant runs) and the hand-checked list of
equivalent survivors, ``tests/mutation_equivalent.txt`` (one ``mutant-name
reason`` per line: mutants that change no behaviour, so no test can kill them).
The score is killed over total less equivalent; a timeout counts as killed (the
mutant hung the tests).

    python tests/mutation_table.py [mutants]
"""

from __future__ import annotations

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


def table(root: Path) -> tuple[list[str], list[str]]:
    """The table's lines, and the survivors not listed as equivalent."""
    eq = equivalent()
    rows = ["| module | killed | total | equivalent | survived | no tests | score | test s |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    unexplained = []
    for meta in sorted(root.rglob("*.py.meta")):
        record = json.loads(meta.read_text())
        codes = record["exit_code_by_key"]
        module = meta.relative_to(root).as_posix().removesuffix(".meta")
        c = Counter()
        for name, code in codes.items():
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
        total = len(codes)
        scored = total - c["equivalent"]
        score = f"{100 * c['killed'] / scored:.1f}%" if scored else "-"
        if c["not checked"]:
            score += f" ({c['not checked']} not run)"
        # mutmut 3.8 leaves durations_by_key at 0; its estimate is the summed duration of
        # the tests each mutant runs, from the stats pass.
        seconds = sum(v for v in record.get("durations_by_key", {}).values() if v) or sum(
            record.get("estimated_durations_by_key", {}).values()
        )
        rows.append(
            f"| {module} | {c['killed']} | {total} | {c['equivalent']} | {c['survived']} | "
            f"{c['no tests']} | {score} | {seconds:.0f} |"
        )
    return rows, unexplained


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "mutants")
    if not root.is_dir():
        print(f"no {root}/: run `make mutation` first", file=sys.stderr)
        return 2
    rows, unexplained = table(root)
    print("\n".join(rows))
    if unexplained:
        print(f"\n{len(unexplained)} survivor(s) not listed as equivalent "
              "(`mutmut show NAME` shows one):")  # fmt: skip
        print("\n".join(f"  {n}" for n in unexplained))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
