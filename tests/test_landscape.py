"""The landscape: every removal set of a small budget, screened, refined, and its refusals."""

from __future__ import annotations

import copy
import itertools
import json
from math import comb
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tiny_models import FAMILY_CONFIGS, save_tiny, tiny_ids, tiny_model

from swapprune.calibration.windows import Calibration
from swapprune.errors import SwappruneError
from swapprune.select.landscape import (
    Admissible,
    ScreeningRule,
    excess,
    percentile_rank,
    refined_rows,
    spearman,
    survivors,
    trie_blocks,
)

# -- pure: which sets ------------------------------------------------------------------


def test_admissible_sets_under_each_constraint():
    assert len(Admissible(6, 2).sets()) == 15
    assert Admissible(6, 2, never_adjacent=True).sets() == [
        (0, 2), (0, 3), (0, 4), (0, 5), (1, 3), (1, 4), (1, 5), (2, 4), (2, 5), (3, 5)
    ]  # fmt: skip
    assert Admissible(6, 2, 1, 1).sets() == [(1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 4)]
    even = Admissible(6, 2, in_phase=lambda s: s[0] % 2 == 0)
    assert even.sets() == [s for s in itertools.combinations(range(6), 2) if s[0] % 2 == 0]
    assert even.admits([4, 2]) and not even.admits([1, 2]) and not even.admits([2, 2])
    assert not Admissible(6, 2, never_adjacent=True).admits([2, 3])
    assert not Admissible(6, 2, 1).admits([0, 3])
    assert Admissible(4, 3, never_adjacent=True).sets() == []
    for L, n, pf, pl, adj in itertools.product(range(3, 9), (1, 2, 3), (0, 1), (0, 2), (0, 1)):
        adm = Admissible(L, n, pf, pl, bool(adj))
        assert adm.upper_count() == len(adm.sets()), (L, n, pf, pl, adj)
        assert adm.total() == comb(L, n)


def test_trie_block_count_is_the_walk_the_runner_makes():
    from swapprune.engine.estimate import trie_blocks as counted

    for L in range(3, 10):
        for n in range(1, 4):
            plans = [
                tuple(b for b in range(L) if b not in s)
                for s in itertools.combinations(range(L), n)
            ]
            assert trie_blocks(L, n) == counted(plans, L), (L, n)
    assert trie_blocks(30, 2) == 4466 and trie_blocks(30, 3) == 31437


# -- pure: the screening rule ----------------------------------------------------------
T = np.full(4, 10.0)  # four windows of ten scored tokens


def table(**per_token):
    """Summed NLL per window from per-token values."""
    return {tuple(int(c) for c in k[1:]): np.asarray(v) * T for k, v in per_token.items()}


def test_screening_rule_keeps_ties_and_drops_clear_losers():
    nll = table(
        s01=[1.0, 1.0, 1.0, 1.0],  # the best
        s02=[1.1, 0.9, 1.05, 0.95],  # no worse on average: kept
        s03=[1.5, 1.5, 1.5, 1.5],  # worse on every window by 0.5: dropped
        s04=[1.004, 1.004, 1.004, 1.004],  # within the margin: kept
        s05=[1.006, 1.006, 1.006, 1.006],  # just outside it, no noise: dropped
        s12=[1.9, 0.9, 1.9, 0.9],  # 0.4 worse, but too noisy to exclude at z = 3: kept
        s13=[1.9, 1.7, 1.9, 1.7],  # 0.8 worse, noise 0.058: dropped
    )
    rule = ScreeningRule(z=3, margin=0.005, top_k=1, min_keep=1)
    assert survivors(nll, T, rule, final=False) == [(0, 1), (0, 2), (0, 4), (1, 2)]
    d, se = excess(nll[(1, 2)], nll[(0, 1)], T)
    assert d == pytest.approx(0.4) and se == pytest.approx(np.sqrt(1 / 3) / 2)
    # A lower z keeps fewer; the floor refills with the lowest; the final round keeps top_k.
    assert survivors(nll, T, ScreeningRule(z=0.5, top_k=1, min_keep=1), False) == [
        (0, 1), (0, 2), (0, 4)
    ]  # fmt: skip
    assert survivors(nll, T, ScreeningRule(top_k=1, min_keep=6), False) == [
        (0, 1), (0, 2), (0, 4), (0, 5), (1, 2), (0, 3)
    ]  # fmt: skip
    # The final round keeps the top_k and every other set that passes, up to max_refine.
    assert survivors(nll, T, ScreeningRule(top_k=2, min_keep=2), True) == [
        (0, 1), (0, 2), (0, 4), (1, 2)
    ]  # fmt: skip
    assert survivors(nll, T, ScreeningRule(top_k=5, min_keep=5), True) == [
        (0, 1), (0, 2), (0, 4), (0, 5), (1, 2)
    ]  # fmt: skip
    capped = ScreeningRule(top_k=2, min_keep=2, max_refine=3)
    assert survivors(nll, T, capped, True) == [(0, 1), (0, 2), (0, 4)]
    with pytest.raises(SwappruneError, match="below top_k"):
        ScreeningRule(top_k=4, max_refine=3)
    one = {s: v[:1] for s, v in nll.items()}  # one window: nothing can be excluded
    assert len(survivors(one, T[:1], rule, final=False)) == len(nll)


def test_excess_weights_windows_by_their_tokens():
    t = np.array([10.0, 30.0])
    d, se = excess(np.array([12.0, 30.0]), np.array([10.0, 30.0]), t)
    assert d == pytest.approx(2.0 / 40)  # token-weighted mean of (0.2, 0.0)
    w = t / t.sum()
    x = np.array([0.2, 0.0])
    assert se == pytest.approx(np.sqrt(2 * np.sum(w**2 * (x - d) ** 2)))


def test_ties_go_to_the_smaller_set():
    nll = table(s23=[1, 1, 1, 1], s01=[1, 1, 1, 1], s02=[2, 2, 2, 2])
    assert survivors(nll, T, ScreeningRule(top_k=1, z=0, margin=0), True) == [(0, 1), (2, 3)]
    assert survivors(nll, T, ScreeningRule(top_k=1, z=0, margin=0), False)[0] == (0, 1)


def test_percentile_rank_and_regret():
    costs = [5.0, 1.0, 3.0, 3.0, 10.0]
    assert percentile_rank(1.0, costs) == (1, 20.0)
    assert percentile_rank(3.0, costs) == (2, 60.0)
    assert percentile_rank(10.0, costs) == (5, 100.0)
    assert percentile_rank(2.0, costs, member=False) == (2, pytest.approx(200 / 6))
    rng = np.random.default_rng(0)
    base = rng.uniform(20, 30, 12)
    tokens = np.full(12, 100.0)
    nll = {(0, 1): base + 5 + rng.normal(0, 1, 12), (2, 3): base + 9 + rng.normal(0, 1, 12)}
    best, rows = refined_rows(nll, base, tokens, n_boot=500, seed=0)
    assert best == (0, 1)
    assert rows[best]["regret_points"] == 0 and rows[best]["regret_ci"] == [0.0, 0.0]
    cost = 100 * (np.exp((nll[(2, 3)].sum() - base.sum()) / tokens.sum()) - 1)
    assert rows[(2, 3)]["cost_points"] == pytest.approx(cost)
    r = rows[(2, 3)]
    assert r["regret_points"] == pytest.approx(r["cost_points"] - rows[best]["cost_points"])
    assert r["regret_ci"][0] > 0 and r["regret_ci"][0] < r["regret_points"] < r["regret_ci"][1]


def test_spearman_matches_scipy():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(1)
    a = rng.normal(size=40)
    b = a + rng.normal(size=40)
    b[:5] = b[0]  # ties
    assert spearman(a, b) == pytest.approx(spearmanr(a, b).statistic)


# -- torch: the fast path --------------------------------------------------------------


def literal_nll(model, removed, ids) -> np.ndarray:
    """Per-window summed NLL of the model rebuilt without ``removed`` (a plain forward)."""
    from swapprune.edit.surgery import apply_plan
    from swapprune.plan import PrunePlan

    L = model.config.num_hidden_layers
    cut = apply_plan(
        copy.deepcopy(model), PrunePlan.from_removal(L, list(removed)), lambda *_: None
    )
    with torch.no_grad():
        logits = cut(input_ids=ids, use_cache=False).logits[:, :-1].float()
    nll = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    )
    return nll.view(ids.shape[0], -1).double().sum(-1).numpy()


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_fast_path_equals_literal_removal_for_every_set(family, monkeypatch):
    from swapprune.engine import head
    from swapprune.engine.exhaustive import SetEvaluator

    monkeypatch.setattr(head, "VOCAB_CHUNK", 40)  # several slices of the 96-entry vocabulary
    model = tiny_model(family)
    ids = tiny_ids(5, 24)  # 24 tokens: past gemma's sliding window of 8
    ev = SetEvaluator(model, ids, batch_size=2)
    sets = list(itertools.combinations(range(6), 2))
    got = ev.evaluate(sets)
    for s in sets:
        np.testing.assert_allclose(got[s], literal_nll(model, s, ids), rtol=1e-6, err_msg=str(s))
    np.testing.assert_allclose(ev.base(), literal_nll(model, [], ids), rtol=1e-6)
    assert ev.compute()["head_rows"] == (len(sets) + 1) * 5 * 23


def test_windows_scored_from_a_position_sum_only_those_tokens():
    """A contract's window scores what follows its context: the sum over those tokens only."""
    from swapprune.engine.exhaustive import SetEvaluator

    model = tiny_model("llama", seed=2)
    ids = tiny_ids(5, 24, seed=4)
    first = [1, 12, 12, 5, 23]  # per window, the first token scored
    ev = SetEvaluator(model, ids, batch_size=2, score_from=first)
    assert ev.tokens.tolist() == [23, 12, 12, 19, 1]
    for s in [(), (1, 3), (0, 5)]:
        got = ev.evaluate([s])[tuple(s)]
        L = model.config.num_hidden_layers
        from swapprune.edit.surgery import apply_plan
        from swapprune.plan import PrunePlan

        cut = apply_plan(copy.deepcopy(model), PrunePlan.from_removal(L, list(s)), lambda *_: None)
        with torch.no_grad():
            logits = cut(input_ids=ids, use_cache=False).logits[:, :-1].float()
        nll = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none").double()
        want = [float(nll[w, f - 1 :].sum()) for w, f in enumerate(first)]
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=str(s))
    assert ev.compute()["head_rows"] == 3 * sum(ev.tokens) + sum(ev.tokens)  # sets + base
    with pytest.raises(ValueError, match="score_from"):
        SetEvaluator(model, ids, score_from=[0, 1, 1, 1, 1])


def test_shared_prefixes_are_bitwise_the_sets_alone():
    from swapprune.engine.exhaustive import SetEvaluator

    model = tiny_model("llama", seed=3)
    ids = tiny_ids(6, 20, seed=1)
    sets = list(itertools.combinations(range(6), 3))
    together = SetEvaluator(model, ids, batch_size=4).evaluate(sets)
    alone = SetEvaluator(model, ids, batch_size=4, cache_bytes=0)  # captures every call anew
    for s in sets:
        assert np.array_equal(alone.evaluate([s])[s], together[s]), s
    # The trie ran fewer blocks than the sets alone.
    shared = SetEvaluator(model, ids, batch_size=4)
    shared.evaluate(sets)
    lone = SetEvaluator(model, ids, batch_size=4)
    for s in sets:
        lone.evaluate([s])
    assert shared.compute()["block_evals"] < lone.compute()["block_evals"]
    assert shared.compute()["block_evals"] == 2 * (6 + trie_blocks(6, 3))


def deeper_model(seed: int, layers: int = 9):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model("llama", **dict(FAMILY_CONFIGS["llama"], num_hidden_layers=layers))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


#: A first-order Markov source over the tiny vocabulary: each token has two likely successors.
SUCCESSORS = np.random.default_rng(0).integers(3, 96, size=(96, 2))


def markov_ids(n: int, t: int, seed: int) -> torch.Tensor:
    """``[n, t]`` windows of the source (one token in ten drawn uniformly instead)."""
    g = np.random.default_rng(seed)
    out = np.empty((n, t), dtype=np.int64)
    out[:, 0] = g.integers(3, 96, size=n)
    for i in range(1, t):
        follow = SUCCESSORS[out[:, i - 1], g.integers(0, 2, size=n)]
        out[:, i] = np.where(g.random(n) < 0.1, g.integers(3, 96, size=n), follow)
    return torch.from_numpy(out)


@pytest.fixture(scope="module")
def trained():
    """A 9-block tiny Llama trained briefly on the Markov source (its blocks mean something)."""
    model = deeper_model(0).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(100):
        x = markov_ids(8, 32, 10_000 + step)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 2.5  # learned (uniform guessing is ln 96 = 4.56)
    return model.eval().requires_grad_(False)


def harmed(model, seed: int):
    """A copy whose blocks carry graded noise: some sets clearly cheaper, near-ties among others."""
    from swapprune.model.stack import decoder_stack

    out = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    blocks = decoder_stack(out).blocks
    sigma = 0.8 * 1.6 ** -torch.randperm(len(blocks), generator=g).float()
    with torch.no_grad():
        for block, s in zip(blocks, sigma):
            w = block.mlp.down_proj.weight
            w.add_(torch.randn(w.shape, generator=g) * s)
    return out


def given(ids, seed=0) -> Calibration:
    return Calibration(ids, "given", seed, None)


def test_bf16_screening_ranks_sets_as_float32(trained):
    from swapprune.engine.exhaustive import SetEvaluator, low_precision_copy
    from swapprune.select.landscape import costs_points

    model = harmed(trained, 0)
    ids = markov_ids(8, 64, seed=5)
    sets = list(itertools.combinations(range(9), 2))
    c = {}
    for name, m in (("fp32", model), ("bf16", low_precision_copy(model))):
        ev = SetEvaluator(m, ids, batch_size=4)
        c[name] = costs_points(ev.evaluate(sets), ev.base(), ev.tokens)
    assert next(model.parameters()).dtype == torch.float32  # the copy left the model alone
    rho = spearman([c["fp32"][s] for s in sets], [c["bf16"][s] for s in sets])
    print(f"bf16 vs float32 screening costs over {len(sets)} sets: Spearman {rho:.3f}")
    assert rho > 0.95
    best = {k: min(v, key=lambda s: (v[s], s)) for k, v in c.items()}
    assert best["fp32"] == best["bf16"]


# -- the study -------------------------------------------------------------------------


def small_settings(**kw):
    from swapprune.studies.landscape import LandscapeSettings

    base = dict(budget=2, top_k=3, min_keep=6, rounds=((6, 12), (8, 24)), refine=(12, 48),
                batch_size=4, batch_sets=8, n_boot=200)  # fmt: skip
    return LandscapeSettings(**(base | kw))


def test_screening_keeps_the_true_best_over_20_seeds(tmp_path, trained):
    from swapprune.engine.exhaustive import SetEvaluator
    from swapprune.select.landscape import costs_points
    from swapprune.studies.landscape import LandscapeWindows, run_landscape

    adm = Admissible(9, 2)
    # With these windows the final round's best alone misses the true best on 6 of the 20.
    settings = small_settings(
        top_k=4, min_keep=8, rounds=((8, 16), (16, 32)), refine=(12, 64), batch_size=16
    )
    refined = 0
    for seed in range(20):
        model = harmed(trained, seed)
        w = [given(markov_ids(n, t, 1000 * seed + r)) for r, (n, t) in enumerate(settings.rounds)]
        refine = given(markov_ids(*settings.refine, 1000 * seed + 99))
        state = run_landscape(
            model, settings, LandscapeWindows(w, refine), adm, tmp_path / str(seed),
            progress=False, picture=False,
        )  # fmt: skip
        refined += len(state["refine"]["nll"])
        ev = SetEvaluator(model, refine.input_ids, 16)
        everything = costs_points(ev.evaluate(adm.sets()), ev.base(), ev.tokens)
        truth = min(everything, key=lambda s: (everything[s], s))
        assert tuple(state["result"]["best"]["set"]) == truth, seed
        assert state["result"]["best"]["cost_points"] == pytest.approx(everything[truth])
    print(f"refined {refined} of {20 * len(adm.sets())} sets over the 20 seeds")
    assert refined <= 20 * len(adm.sets()) // 2  # the screening did drop sets


class Killed(Exception):
    pass


def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path):
    from swapprune.studies.landscape import LandscapeWindows, run_landscape
    from swapprune.studies.landscape_picks import Pick

    model = deeper_model(1, layers=7)
    settings = small_settings(bf16_screening=True, batch_sets=4)
    w = LandscapeWindows(
        [given(tiny_ids(n, t, seed=r)) for r, (n, t) in enumerate(settings.rounds)],
        given(tiny_ids(*settings.refine, seed=9)),
    )
    adm = Admissible(7, 2, never_adjacent=True)

    def picks(done):
        for name, s in (("first", [0, 1]), ("second", [2, 5])):  # [0, 1] is not admissible
            if name not in done:
                yield Pick(name, s, {"strategy": "given"}, {"cpu_s": 0.0})

    def run(out, on_batch=None):
        return run_landscape(model, settings, w, adm, out, criteria=picks, progress=False,
                             criteria_names=["first", "second"], on_batch=on_batch,
                             picture=False)  # fmt: skip

    whole = run(tmp_path / "whole")
    for stop_at in (("round 0", 2), ("round 1", 1), ("refine", 1)):
        out = tmp_path / f"{stop_at[0]}-{stop_at[1]}"
        seen = {}

        def kill(stage, done, stop_at=stop_at, seen=seen):
            seen[stage] = seen.get(stage, 0) + 1
            if (stage, seen[stage]) == stop_at:
                raise Killed

        with pytest.raises(Killed):
            run(out, kill)
        partial = json.loads((out / "landscape.json").read_text())
        assert not partial["complete"]
        resumed = run(out)
        strip = lambda s: {k: v for k, v in s.items() if k != "compute"}  # noqa: E731
        assert strip(resumed) == strip(json.loads(json.dumps(whole)))
        on_disk = json.loads((out / "landscape.json").read_text())
        assert strip(on_disk) == strip(
            json.loads((tmp_path / "whole" / "landscape.json").read_text())
        )
    row = {c["criterion"]: c for c in whole["result"]["criteria"]}
    assert not row["first"]["admissible"] and row["second"]["admissible"]
    assert len(whole["result"]["sets"]) == len(adm.sets()) == 15
    # Other settings in the same directory are refused, not mixed in.
    with pytest.raises(SwappruneError, match="other settings"):
        run_landscape(model, small_settings(top_k=4), w, adm, tmp_path / "whole", picture=False,
                      progress=False)  # fmt: skip


# -- the command line ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny("llama", tmp_path_factory.mktemp("landscape") / "tiny")


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--budget", "4"], "C(6,4) = 15 removal sets"),
        (["--budget", "6", "--force"], "would remove every block: the model has 6"),
        (["--budget", "3", "--never-adjacent", "--protect-first", "2"], "no removal set of 3"),
        (["--budget", "2", "--rounds", "8x1"], "at least 1 window of at least 2 tokens"),
        (["--budget", "2", "--criteria", "bii"], "did you mean 'bi'"),
    ],
)
def test_refusals_are_one_line_before_the_model_loads(
    tiny_dir, tmp_path, monkeypatch, capsys, flags, says
):
    from swapprune.cli import main
    from swapprune.pipeline import stages

    def no_load(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(stages, "load", no_load)
    out = tmp_path / "out"
    code = main(
        ["landscape", "--model", str(tiny_dir), "--output", str(out), *flags, "--no-progress"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and says in err, err
    assert not out.exists()


def test_budget_refusal_gives_a_time_estimate(tiny_dir, tmp_path, capsys):
    from swapprune.cli import main

    assert (
        main(
            [
                "landscape",
                "--model",
                str(tiny_dir),
                "--budget",
                "5",
                "--output",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "CPU time at one thread" in capsys.readouterr().err


def test_command_runs_the_criteria_and_resumes(tiny_dir, tmp_path, capsys):
    from swapprune.calibration.windows import vendored_text
    from swapprune.cli import main

    text = tmp_path / "calib.txt"
    text.write_text(vendored_text("wiki.valid.raw")[:30_000])
    out = tmp_path / "land"
    line = ["landscape", "--model", str(tiny_dir), "--calib", str(text), "--budget", "2", "--top-k", "3",
            "--min-keep", "6", "--rounds", "4x32,8x48", "--refine", "6x96", "--prompts", "8",
            "--tokens", "32", "--criteria", "interchange,bi,sleb,random", "--bootstrap", "200",
            "--output", str(out), "--no-progress"]  # fmt: skip
    assert main(line) == 0
    state = json.loads((out / "landscape.json").read_text())
    res = state["result"]
    assert state["complete"] and len(res["sets"]) == 15
    assert {c["criterion"] for c in res["criteria"]} == {"interchange", "bi", "sleb", "random"}
    for c in res["criteria"]:
        assert 1 <= c["rank"] <= 15 and c["regret_ci"][0] <= c["regret_points"] <= c["regret_ci"][1]
        assert c["regret_points"] >= 0
    refined = {tuple(r["set"]) for r in res["refined"]}
    assert {tuple(c["set"]) for c in res["criteria"]} <= refined
    assert min(r["regret_points"] for r in res["refined"]) == 0
    assert [r["screening_cost_points"] for r in res["sets"]] == sorted(
        r["screening_cost_points"] for r in res["sets"]
    )
    assert (out / "landscape.png").stat().st_size > 10_000
    w = state["windows"]
    assert w["disjoint"] == "spans" and w["refine"]["tokens"] == 96
    stages = set(state["compute"])
    assert {"probes", "round 0", "refine", "criterion sleb"} <= stages
    assert all(state["compute"][s]["cpu_s"] >= 0 for s in stages)
    printed = capsys.readouterr().out
    assert "best of 15 sets" in printed and "sleb:" in printed
    assert main(line) == 0  # complete: nothing is recomputed
    assert json.loads((out / "landscape.json").read_text())["compute"] == state["compute"]


def test_exhaustive_strategy_picks_the_cheapest_set():
    from swapprune.api import plan_pruning
    from swapprune.engine.exhaustive import exhaustive_search
    from swapprune.engine.oracle import CalibrationOracle
    from swapprune.select.strategies import get_strategy

    model = tiny_model("llama", seed=2)
    ids = tiny_ids(6, 24, seed=4)
    plan, _ = plan_pruning(model, calibration=given(ids), budget=2, protocol="random",
                           strategy="exhaustive", certify=False, adaptive="off",
                           progress=False)  # fmt: skip
    oracle = CalibrationOracle(model, ids)
    costs = {s: oracle.cost(s) for s in itertools.combinations(range(6), 2)}
    assert tuple(plan.removed) == min(costs, key=lambda s: (costs[s], s))
    assert plan.scores["selection"]["sets"] == 15
    ref = exhaustive_search(model, ids, Admissible(6, 2))
    assert ref.best == tuple(plan.removed) and len(ref.costs) == 15
    assert [s for s, _ in ref.top[:3]] == sorted(costs, key=lambda s: (costs[s], s))[:3]
    from swapprune.select.constraints import Constraints

    with pytest.raises(SwappruneError, match="more than 10"):
        get_strategy("exhaustive:10").check(2, Constraints(6))


def test_heldout_windows_that_touch_a_screening_window_are_refused():
    from swapprune.studies.landscape_windows import LandscapeWindows, check_disjoint

    ids = tiny_ids(2, 40, seed=7)
    screen = Calibration(ids, "text", 0, [(0, 40), (100, 140)])
    clear = Calibration(ids, "text", 0, [(40, 80), (140, 180)])
    touching = Calibration(ids, "text", 0, [(40, 80), (139, 179)])
    assert check_disjoint(LandscapeWindows([screen], clear)) == "spans"
    with pytest.raises(SwappruneError, match="overlap"):
        check_disjoint(LandscapeWindows([screen], touching))
    other = Calibration(ids, "other text", 0, [(0, 40), (100, 140)])
    assert check_disjoint(LandscapeWindows([screen], other)) == "sources"
    # Windows without positions: compared by runs of token ids.
    fresh = given(tiny_ids(2, 40, seed=8))
    assert check_disjoint(LandscapeWindows([given(ids)], fresh)) == "32-grams of token ids"
    shifted = given(torch.cat([tiny_ids(2, 5, seed=9), ids[:, :35]], dim=1))
    with pytest.raises(SwappruneError, match="share token ids"):
        check_disjoint(LandscapeWindows([given(ids)], shifted))


def test_the_oracle_reads_the_sliced_head_as_the_full_one(monkeypatch):
    """The calibration oracle's NLL (SLEB, auto's search, the certificate) through the
    vocabulary-sliced head equals cross-entropy over the full logits."""
    from swapprune.engine import head
    from swapprune.engine.oracle import CalibrationOracle

    monkeypatch.setattr(head, "VOCAB_CHUNK", 40)
    monkeypatch.setattr(head, "ROWS", 7)  # rows in several calls, the last one short
    model = tiny_model("gemma2")  # soft-capped logits
    ids = tiny_ids(4, 20, seed=5)
    oracle = CalibrationOracle(model, ids, batch_size=3)
    for removed in ([], [2], [1, 4]):
        want = literal_nll(model, removed, ids) / 19
        np.testing.assert_allclose(oracle.window_costs(removed), want, rtol=1e-6)
        assert oracle.cost(removed) == pytest.approx(float(np.exp(want.mean())), rel=1e-6)


def test_a_landscape_joins_the_certificates_reference(tiny_dir, tmp_path, capsys):
    """``--landscape FILE``: its top sets are measured with the criterion's own, labelled."""
    from swapprune.cli import main

    tiny_dir = str(tiny_dir)
    land = tmp_path / "land"
    argv = ["landscape", "--model", tiny_dir, "--budget", "2", "--prompts", "4", "--tokens",
            "32", "--rounds", "4x32", "--refine", "4x64", "--criteria", "none", "--top-k", "3",
            "--output", str(land), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    out = tmp_path / "cut"
    run = ["--model", tiny_dir, "--budget", "2", "--prompts", "4", "--tokens", "32",
           "--heldout-prompts", "4", "--heldout-tokens", "64", "--no-eval", "--no-selfcheck",
           "--landscape", str(land / "landscape.json"), "--landscape-sets", "3",
           "--output", str(out), "--no-progress"]  # fmt: skip
    assert main(run) == 0
    plan = json.loads((out / "plan.json").read_text())
    cert = plan["scores"]["certificate"]
    top = json.loads((land / "landscape.json").read_text())["result"]["refined"][:3]
    sources = {tuple(r["set"]): r["source"] for r in cert["sets"]}
    for row in top:  # each top set is in the reference (as the chosen one, or from the landscape)
        assert tuple(row["set"]) in sources
    # the spec carries them, cheapest first, for every selection of the run
    from swapprune.config import CalibrationConfig, SelectConfig
    from swapprune.model.facts import ModelFacts
    from swapprune.pipeline.checks import selection_spec

    facts = ModelFacts.from_config(json.loads((Path(tiny_dir) / "config.json").read_text()))
    sel = SelectConfig(budget=2, landscape=str(land / "landscape.json"), landscape_sets=2)
    spec = selection_spec(sel, CalibrationConfig(), facts)
    assert list(spec.landscape) == [tuple(r["set"]) for r in top[:2]]
    # a landscape of another budget is refused in one line, before the model loads
    bad = [*run[: run.index("--budget") + 1], "3", *run[run.index("--budget") + 2 :]]
    capsys.readouterr()
    assert main([*bad[:-3], "--output", str(tmp_path / "bad"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "of budget 2; this cut removes 3" in err and not (tmp_path / "bad").exists()


@pytest.mark.parametrize("adjacent_ok", [True, False])
@pytest.mark.parametrize("phase", [None, "even"])
def test_admits_is_membership_in_the_admissible_sets(adjacent_ok, phase):
    in_phase = None if phase is None else (lambda s: sum(s) % 2 == 0)
    adm = Admissible(9, 3, protect_first=1, protect_last=2, never_adjacent=not adjacent_ok,
                     in_phase=in_phase)  # fmt: skip
    listed = set(adm.sets())
    assert adm.sets() == sorted(listed)
    for s in itertools.product(range(-1, 11), repeat=3):
        assert adm.admits(s) == (tuple(sorted(s)) in listed), s
    assert adm.admits([1, 3, 6]) == (phase is None or (1 + 3 + 6) % 2 == 0)
    assert not adm.admits([1, 3]) and not adm.admits([1, 1, 3])
    assert adm.candidates() == [1, 2, 3, 4, 5, 6]
    free = 6
    assert adm.upper_count() == (comb(free, 3) if adjacent_ok else comb(free - 3 + 1, 3))
    if phase is None:
        assert adm.upper_count() == len(listed)
    assert adm.total() == comb(9, 3)
    assert Admissible(9, 0).upper_count() == 0 and Admissible(3, 4).upper_count() == 0


def test_admissible_sets_come_from_the_selections_constraints():
    from types import SimpleNamespace

    from swapprune.select.landscape import from_constraints

    serve = SimpleNamespace(in_phase=lambda s: 4 not in s)
    cons = SimpleNamespace(num_layers=8, protect_first=1, protect_last=2, serve=serve)
    adm = from_constraints(cons, 2, never_adjacent=True)
    assert (adm.num_layers, adm.budget, adm.protect_first, adm.protect_last) == (8, 2, 1, 2)
    assert adm.never_adjacent and adm.in_phase is serve.in_phase
    assert adm.sets() == [(1, 3), (1, 5), (2, 5), (3, 5)]
    plain = from_constraints(SimpleNamespace(num_layers=8, protect_first=0, protect_last=0), 2)
    assert plain.in_phase is None and not plain.never_adjacent and plain.upper_count() == 28
    none_served = from_constraints(
        SimpleNamespace(num_layers=8, protect_first=0, protect_last=0, serve=None), 2
    )
    assert none_served.in_phase is None


def test_pooled_nll_is_summed_nll_over_summed_tokens():
    from swapprune.select.landscape import pooled, ranked

    assert pooled(np.array([3.0, 5.0]), np.array([2.0, 2.0])) == 2.0
    nll = {(2, 3): np.array([3.0, 5.0]), (1, 4): np.array([4.0, 4.0]), (0, 1): np.array([9.0, 0.0])}
    assert ranked(nll, np.array([2, 2])) == [(1, 4), (2, 3), (0, 1)]  # ties: lexicographic


def test_the_constraints_in_words():
    assert Admissible(8, 2).describe() == "no constraint"
    both = Admissible(8, 2, 1, 2, never_adjacent=True, in_phase=lambda s: True)
    assert both.describe() == (
        "first 1 protected, last 2 protected, never two adjacent, in phase for the serving runtimes"
    )
    assert Admissible(8, 2, protect_last=1).describe() == "last 1 protected"


def test_excess_is_computed_in_float64_whatever_its_inputs():
    rng = np.random.default_rng(0)
    nll, best = (rng.normal(300, 5, 6).astype(np.float32) for _ in range(2))
    t = np.full(6, 127, dtype=np.float32)
    want = excess(nll.astype(np.float64), best.astype(np.float64), t.astype(np.float64))
    assert excess(nll, best, t) == want
    assert excess(nll.astype(np.float64), best, t) == want


def test_a_round_passing_exactly_its_floor_keeps_the_sets_that_passed():
    nll = table(
        s01=[1.0, 1.0, 1.0, 1.0], s02=[1.1, 0.9, 1.05, 0.95], s03=[1.5, 1.5, 1.5, 1.5],
        s04=[1.004, 1.004, 1.004, 1.004], s05=[1.006, 1.006, 1.006, 1.006],
        s12=[1.9, 0.9, 1.9, 0.9], s13=[1.9, 1.7, 1.9, 1.7],
    )  # fmt: skip
    # four pass, among them the noisy (1, 2) below the clearly worse (0, 5)
    rule = ScreeningRule(z=3, margin=0.005, top_k=1, min_keep=4)
    assert survivors(nll, T, rule, final=False) == [(0, 1), (0, 2), (0, 4), (1, 2)]


def test_the_screening_rule_refuses_what_it_cannot_mean():
    for kw, line in [
        (dict(top_k=0), "top_k must be >= 1, got 0"),
        (dict(z=-1.0), "the screening rule needs z >= 0 and margin >= 0"),
        (dict(margin=-0.1), "the screening rule needs z >= 0 and margin >= 0"),
        (dict(top_k=4, min_keep=3), "min_keep 3 is below top_k 4"),
        (dict(top_k=4, max_refine=3), "max_refine 3 is below top_k 4"),
    ]:
        with pytest.raises(SwappruneError) as e:
            ScreeningRule(**kw)
        assert str(e.value) == line
    assert ScreeningRule(top_k=3, min_keep=3, max_refine=3).floor == 3


def test_cost_samples_are_the_cost_on_each_resample():
    from swapprune.select.certificate import cost_samples

    nll, base, t = (
        np.array([310.0, 290.0, 305.0]),
        np.array([300.0, 280.0, 300.0]),
        np.full(3, 100.0),
    )
    idx = np.array([[0, 1, 2], [0, 0, 0], [2, 1, 1]])
    point, boot = cost_samples(nll, base, t, idx)
    assert point == pytest.approx(np.exp(25 / 300) - 1)
    assert boot == pytest.approx([np.exp(25 / 300) - 1, np.exp(30 / 300) - 1, np.exp(25 / 300) - 1])
