"""tests/mutation_table.py: counts per module, and per function over named mutants."""

from __future__ import annotations

import json

import mutation_table as mt


def _meta(root, module: str, codes: dict) -> None:
    path = root / f"{module}.meta"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"exit_code_by_key": codes}))


def test_per_module_and_per_named_function(tmp_path, monkeypatch):
    monkeypatch.setattr(mt, "equivalent", lambda: {"p.m.x_f__mutmut_3": "no behaviour"})
    _meta(tmp_path, "p/m.py", {
        "p.m.x_f__mutmut_1": 1, "p.m.x_f__mutmut_2": 0, "p.m.x_f__mutmut_3": 0,
        "p.m.x\u01c1C\u01c1g__mutmut_1": 1, "p.m.x\u01c1C\u01c1g__mutmut_2": None,
        "p.m.x_h__mutmut_1": 33,
    })  # fmt: skip
    rows, unexplained = mt.table(tmp_path)
    assert rows[2] == "| p/m.py | 2 | 6 | 1 | 1 | 1 | 40.0% (1 not run) | 0 |"
    assert unexplained == ["p.m.x_f__mutmut_2"]
    only = ["p.m.x_f__*", "p.m.x\u01c1C\u01c1*"]
    rows, unexplained = mt.table(tmp_path, only)
    assert rows[2:] == [
        "| p.m.f | 1 | 3 | 1 | 1 | 0 | 50.0% | 0 |",
        "| p.m.C.g | 1 | 2 | 0 | 0 | 0 | 50.0% (1 not run) | 0 |",
        "| **all of these** | 2 | 5 | 1 | 1 | 0 | 50.0% (1 not run) | 0 |",
    ]
    f = tmp_path / "only.txt"
    f.write_text("# a comment\np.m.x_f__*  # trailing\n\n")
    assert mt.patterns(f) == ["p.m.x_f__*"]
