"""compare's cells: what a --criteria entry selects, checked before any model loads."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from swapprune.config import CalibrationConfig, CompareConfig, RunConfig, SelectConfig
from swapprune.config.cells import cell_select
from swapprune.errors import SwappruneError
from swapprune.pipeline.checks import check_compare
from swapprune.studies.compare_cells import criterion_of, is_random, method_config, method_runs


def test_an_entry_names_a_criterion_a_strategy_a_merge_or_a_control_shortlist():
    plain = cell_select("interchange")
    assert (plain.protocol, plain.strategy, plain.op) == ("interchange", None, "remove")
    ranked = cell_select("interchange@ranked", strategy="greedy")
    assert ranked.strategy == "ranked"  # the entry's own strategy wins over --strategy
    assert cell_select("bi", strategy="greedy").strategy == "greedy"
    spaced = cell_select("interchange@spaced:2")
    assert spaced.strategy == "spaced:2"
    laco = cell_select("interchange@merge:laco")
    assert (laco.op, laco.merge, laco.strategy) == ("merge", "laco", None)
    assert (cell_select("replacement@merge").op, cell_select("replacement@merge").merge) == (
        "merge",
        "average",
    )
    both = cell_select("bi@greedy@merge:average")
    assert (both.protocol, both.strategy, both.op) == ("bi", "greedy", "merge")
    control = cell_select("auto@shortlist:random")
    assert control.protocol == "auto" and control.auto_shortlist == "random"
    for bad, msg in (
        ("bi@", "empty part"),
        ("@greedy", "empty part"),
        ("bi@greedy@ranked", "two strategies"),
        ("bi@merge@merge:laco", "two merges"),
    ):
        with pytest.raises(SwappruneError, match=msg):
            cell_select(bad)


def test_the_comparison_checks_every_entry_and_its_margin(tmp_path):
    def check(**kw):
        check_compare(CompareConfig(output=str(tmp_path / "o"), **kw))

    check(criteria=["interchange@ranked", "bi@greedy", "interchange@merge:laco", "auto"])
    with pytest.raises(SwappruneError, match="did you mean 'greedy'"):
        check(criteria=["bi@greddy"])
    with pytest.raises(SwappruneError, match="did you mean 'laco'"):
        check(criteria=["interchange@merge:lacco"])
    with pytest.raises(SwappruneError, match="does not merge"):
        check(criteria=["auto@merge"])
    with pytest.raises(SwappruneError, match="setting of --protocol auto"):
        check(criteria=["bi@shortlist:random"])
    with pytest.raises(SwappruneError, match="margin must be > 0"):
        check(margin=0.0)
    with pytest.raises(SwappruneError, match="did you mean 'points'"):
        check(margin_unit="point")
    with pytest.raises(SwappruneError, match="the random baseline needs"):
        check(criteria=["random@greedy"], random_seeds=[])


def test_labels_are_entries_as_written_and_random_expands_over_seeds():
    job = SimpleNamespace(
        compare=CompareConfig(
            output="o", criteria=["bi@greedy", "random@greedy", "random"], random_seeds=[0, 3]
        ),
        calib=CalibrationConfig(seed=7),
    )
    assert method_runs(job) == [
        ("bi@greedy", "bi@greedy", 7),
        ("random@greedy:0", "random@greedy", 0),
        ("random@greedy:3", "random@greedy", 3),
        ("random:0", "random", 0),
        ("random:3", "random", 3),
    ]
    assert [is_random(lab) for lab, _, _ in method_runs(job)] == [False, True, True, True, True]
    assert criterion_of("interchange@merge:laco") == "interchange"


def test_a_cell_s_prune_section_is_the_shared_one_with_the_entry_s_own_on_top():
    job = SimpleNamespace(
        compare=CompareConfig(output="o", strategy="greedy"),
        select=SelectConfig(protect_first=1, certify_sets=4),
        run=RunConfig(),
        calib=CalibrationConfig(),
    )
    p = method_config(job, "interchange@merge:laco", 2, 3).prune
    assert (p.protocol, p.op, p.merge, p.strategy, p.budget) == ("interchange", "merge", "laco", "greedy", 3)  # fmt: skip
    assert p.protect_first == 1 and p.certify_sets == 4 and p.certify is False
    a = method_config(job, "auto@shortlist:bi", 2, 3)
    assert a.prune.auto_shortlist == "bi" and a.prune.certify is True and a.calibration.seed == 2


def test_checking_a_comparison_imports_no_torch(tmp_path):
    code = f"""
import sys
from swapprune.config import CompareConfig
from swapprune.pipeline.checks import check_compare
check_compare(CompareConfig(output={str(tmp_path / "o")!r}, criteria=["interchange@ranked",
              "bi@greedy", "interchange@merge:laco", "auto@shortlist:random"], margin=1.5))
bad = [m for m in ("torch", "transformers", "lm_eval") if m in sys.modules]
assert not bad, bad
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
