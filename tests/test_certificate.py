"""The regret certificate: ties certify, a better challenger wins, held-out windows stay held out."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from tiny_models import tiny_tokenizer

from swapprune.calibration.heldout import heldout_windows
from swapprune.calibration.tokens import encode
from swapprune.calibration.windows import load_calibration, source_text
from swapprune.config import SelectConfig
from swapprune.errors import SwappruneError
from swapprune.select import criteria
from swapprune.select.adaptive import AdaptiveSettings, tranches
from swapprune.select.certificate import (
    Certificate,
    certify,
    plausible_sets,
    spending_quantile,
    split_windows,
)
from swapprune.select.constraints import Constraints
from swapprune.select.strategies import get_strategy

H, T = 40, 511  # held-out windows, scored tokens per window


def nll_table(costs: dict, noise: float, seed: int = 0) -> tuple[dict, np.ndarray, np.ndarray]:
    """Per-window summed NLL of sets whose true cost (dPPL, a fraction) is ``costs[set]``.

    Every window gets the same shared difficulty (so sets are paired) plus independent noise.
    """
    rng = np.random.default_rng(seed)
    tokens = np.full(H, T, dtype=float)
    difficulty = rng.normal(0, 0.3, H)
    base = (3.0 + difficulty) * tokens
    out = {}
    for s, c in costs.items():
        per_token = 3.0 + np.log1p(c) + difficulty + rng.normal(0, noise, H)
        out[s] = per_token * tokens
    return out, base, tokens


def test_two_exactly_tied_sets_certify():
    """Equal true cost: the regret is noise around 0 and stays under the tolerance."""
    nll, base, tokens = nll_table({(3, 5): 0.30, (4, 6): 0.30}, noise=0.002)
    cert = certify((3, 5), nll, base, tokens)
    assert cert.certified and not cert.switched and cert.kept == [3, 5]
    assert cert.r95 < cert.delta and cert.p_within > 0.95
    # no tie-break by noise: the challenger's CI straddles 0
    lo, hi = cert.sets[1]["better_than_chosen_ci"]
    assert lo < 0 < hi


def test_the_frequent_but_costly_set_loses_to_its_challenger():
    """The criterion's choice is clearly worse on held-out windows: the challenger is kept."""
    nll, base, tokens = nll_table({(3, 5): 0.40, (4, 6): 0.30, (2, 7): 0.60}, noise=0.002)
    cert = certify((3, 5), nll, base, tokens)
    assert cert.switched and cert.kept == [4, 6] and cert.chosen == [3, 5]
    assert cert.gain == pytest.approx(10.0, abs=0.5)  # 40% -> 30%: ten dPPL points
    assert cert.certified  # the kept set is itself the best of the plausible ones
    assert cert.sets[1]["better_than_chosen_ci"][0] > 0


def test_a_costly_choice_that_cannot_be_told_apart_is_not_certified():
    """Noise too large to separate the sets, and a gap too large to forgive: not certified."""
    nll, base, tokens = nll_table({(3, 5): 0.34, (4, 6): 0.30}, noise=0.3)
    cert = certify((3, 5), nll, base, tokens)
    assert not cert.switched and not cert.certified and cert.r95 > cert.delta
    assert "NOT certified" in cert.summary()


def test_delta_defaults_to_one_point_or_five_percent_of_the_cost():
    nll, base, tokens = nll_table({(1, 2): 0.10}, noise=0.0)
    assert certify((1, 2), nll, base, tokens).delta == pytest.approx(1.0)
    nll, base, tokens = nll_table({(1, 2): 0.60}, noise=0.0)
    assert certify((1, 2), nll, base, tokens).delta == pytest.approx(3.0, rel=1e-6)
    assert certify((1, 2), nll, base, tokens, delta=0.5).delta == 0.5


def test_plausible_sets_floor_cap_and_mass_outside():
    counts = {(1, 3): 50, (2, 4): 30, (1, 4): 15, (5, 7): 3, (6, 8): 2}
    sets, mass = plausible_sets((2, 4), counts, floor=0.05, max_sets=6)
    assert sets == [(2, 4), (1, 3), (1, 4)] and mass == pytest.approx(0.05)
    sets, mass = plausible_sets((2, 4), counts, floor=0.05, max_sets=2)
    assert sets == [(2, 4), (1, 3)] and mass == pytest.approx(0.20)
    sets, mass = plausible_sets((2, 4), None, extra=[(5, 6)])
    assert sets == [(2, 4), (5, 6)] and mass is None


def test_spending_over_looks_raises_the_quantile():
    assert spending_quantile(1) == pytest.approx(0.95)
    assert spending_quantile(8) == pytest.approx(1 - 0.05 / 8)


L = 8
PAIRS = [(i, i + 1) for i in range(L - 1)]


def _tied_measure(calls):
    """Two pairs exactly tied at the bottom, the rest far above: a near-tie for ever."""
    means = {p: 2.0 + p[0] for p in PAIRS}
    means[(1, 2)], means[(5, 6)] = 0.050, 0.0505

    def measure(pairs, rows):
        calls.append(list(pairs))
        out = {}
        for p in pairs:
            z = np.array(
                [np.random.default_rng(1000 * p[0] + int(r)).standard_normal() for r in rows]
            )
            inter = means[p] * np.maximum(0.05, 1 + 0.3 * z)
            out[p] = {"inter": inter, "repl_ij": 4 * inter, "repl_ji": 3 * inter}
        return out

    return measure


def _run(judge):
    calls = []
    res = tranches(
        _tied_measure(calls),
        PAIRS,
        {"num_layers": L},
        [criteria.get("interchange")],
        get_strategy("greedy"),
        1,
        Constraints(L),
        AdaptiveSettings(target=0.9, tranche=8, max_windows=64, n_boot=300),
        judge=judge,
    )
    return res, calls


def test_a_near_tie_runs_to_the_cap_on_frequency_but_stops_on_the_certificate():
    """The two pairs' scores differ by 1%; on held-out windows, by construction, the sets
    their blocks make cost the same: a near-tie the frequency can never settle."""
    freq, _ = _run(None)
    assert freq.stopped == "max windows" and freq.scores.num_windows() == 64

    looks = []

    def judge(scores, stability, look, n_looks):
        chosen = stability["interchange"].chosen
        sets, mass = plausible_sets(chosen, stability["interchange"].counts)
        costs = {s: 0.30 for s in sets}  # equal true cost: a tie
        nll, base, tokens = nll_table(costs, noise=0.002, seed=look)
        cert = certify(chosen, nll, base, tokens, quantile=spending_quantile(n_looks))
        looks.append((look, n_looks, len(sets)))
        return {"certified": cert.certified, "r_stop": cert.r_stop}

    cert, calls = _run(judge)
    assert cert.stopped == "certified" and len(cert.rounds) == 1 and len(calls) == 1
    assert cert.scores.num_windows() == 8 and looks == [(1, 8, looks[0][2])]
    assert looks[0][2] >= 2  # both tied sets were plausible: the certificate saw the tie
    assert cert.scores.meta["adaptive"]["stop_rule"] == "certificate"


def test_heldout_windows_never_touch_the_scoring_windows():
    """Checked on token ids: every held-out window is its own span of the text, and no span
    meets a scoring window's (the adaptive pool included)."""
    tok = tiny_tokenizer()
    scoring = load_calibration(tok, None, prompts=64, tokens=48, seed=3)
    held = heldout_windows(tok, None, 16, 200, 3, [scoring])
    ids = encode(tok, source_text("wikitext2-valid"), add_special_tokens=False)
    bos = held.input_ids.shape[1] - (held.spans[0][1] - held.spans[0][0])
    for row, (a, b) in zip(held.input_ids.tolist(), held.spans):
        assert row[bos:] == ids[a:b]
        for s, e in scoring.spans:
            assert b <= s or e <= a
    for row, (a, b) in zip(scoring.input_ids.tolist(), scoring.spans):
        assert row[bos:] == ids[a:b]
    taken = {i for s, e in scoring.spans for i in range(s, e)}
    assert not taken & {i for s, e in held.spans for i in range(s, e)}
    # a second held-out set for auto's search avoids both
    more = heldout_windows(tok, None, 16, 200, 4, [scoring, held])
    assert not {i for s, e in more.spans for i in range(s, e)} & (
        taken | {i for s, e in held.spans for i in range(s, e)}
    )


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"certify_sets": 0}, "certify_sets must be >= 1"),
        ({"certify_delta": -0.5}, "certify_delta must be >= 0"),
        ({"certify_floor": 0.0}, "certify_floor must be in"),
        ({"heldout_prompts": 1}, "heldout_prompts must be >= 4"),
    ],
)
def test_bad_certificate_settings_are_refused_before_any_model(kw, match):
    with pytest.raises(SwappruneError, match=match) as e:
        SelectConfig(budget=2, **kw).check()
    assert "\n" not in str(e.value)


def test_too_few_heldout_windows_is_one_line():
    tok = tiny_tokenizer()
    scoring = load_calibration(tok, None, prompts=8, tokens=32, seed=0)
    with pytest.raises(SwappruneError, match="held-out source .* windows of 100000 tokens") as e:
        heldout_windows(tok, None, 8, 100000, 0, [scoring])
    assert "\n" not in str(e.value)


def _cert(**kw):
    from swapprune.select.certificate import Certificate

    fields = dict(chosen=[3, 5], kept=[3, 5], switched=False, gain=0.0,
                  sets=[{"set": [3, 5], "source": "chosen", "cost_points": 30.0},
                        {"set": [2, 5], "source": "criterion", "cost_points": 31.0},
                        {"set": [1, 5], "source": "bi", "cost_points": 35.0}],
                  r95=0.25, quantile=0.95, r_stop=0.25, p_within=0.99, delta=1.5, certified=True,
                  mass_outside=None, plausible_from="bootstrap", windows=8, tokens=4088,
                  n_boot=1000, seed=0, choose_windows=4, measure_windows=4,
                  scope="the calibration text (wikitext2-valid)")  # fmt: skip
    return Certificate(**(fields | kw))


def test_the_certificate_line_says_what_was_shown():
    assert _cert().summary() == (
        "certificate: certified: within 1.50 dPPL points of the cheapest of 3 cuts compared "
        "(2 of the criterion's own sets, Block Influence's set) with 95% confidence (regret "
        "R95 0.25), on 4 held-out windows of the calibration text (wikitext2-valid)"
    )
    best = {"set": [1, 5], "source": "bi", "cost_points": 12.0, "gain_points": 18.0}
    line = _cert(certified=False, reasons=["regret", "mass"], r95=18.2, mass_outside=0.12,
                 best=best, switched=True, chosen=[2, 5], gain=2.345)  # fmt: skip
    assert line.summary() == (
        "certificate: NOT certified: Block Influence's set [1, 5] costs +12.0% against this "
        "cut's +30.0%; the cut may be 18.20 dPPL points worse than the cheapest of 3 cuts "
        "compared (2 of the criterion's own sets, Block Influence's set), above the tolerance "
        "1.50; 12% of the selection's bootstrap fell outside the sets measured (at most 10% "
        "certifies), on 4 held-out windows of the calibration text (wikitext2-valid); the "
        "criterion chose [2, 5], [3, 5] was cheaper by 2.35 points on 4 other windows and was "
        "kept"
    )


def test_the_card_paragraph_counts_in_the_singular_too():
    two = _cert(sets=_cert().sets[:2])
    assert "It was compared with 1 other cut (the criterion's own set) on 4 held-out" in (
        two.paragraph()
    )
    assert "It was compared with 2 other cuts (" in _cert().paragraph()
    alone = _cert(sets=_cert().sets[:1])
    assert "No other cut was compared" in alone.paragraph()
    assert "the cheapest of 1 cut compared (" in alone.summary()


def test_the_certificate_record_round_trips():
    from swapprune.select.certificate import Certificate

    cert = _cert(
        extra={"looks": 2},
        reasons=[],
        best={"set": [2, 5], "source": "criterion", "cost_points": 31.0, "gain_points": -1.0},
    )
    d = cert.to_dict()
    assert d["heldout"] == {
        "windows": 8, "tokens": 4088, "choose": 4, "measure": 4,
        "split": "the first half of the held-out windows chooses, the second measures",
        "scope": "the calibration text (wikitext2-valid)",
    }  # fmt: skip
    assert d["looks"] == 2 and d["mass_gate"] == 0.10 and d["switch_among"] == "own"
    assert Certificate.from_dict(d | {"summary": cert.summary()}) == cert
    # a record written before the split still reads: every window measured, no sources
    old = {"chosen": [3, 5], "kept": [3, 5], "switched": False, "gain_points": 0.0,
           "sets": [{"set": [3, 5], "cost_points": 30.0}], "r95_points": 0.0,
           "stop_quantile": 0.95, "r_stop_points": 0.0, "p_within_delta": 1.0,
           "delta_points": 1.5, "certified": True, "mass_outside": 0.2,
           "plausible_from": "bootstrap", "heldout": {"windows": 8, "tokens": 4088},
           "bootstrap": {"resamples": 1000, "seed": 0, "unit": "held-out window"}}  # fmt: skip
    back = Certificate.from_dict(old)
    assert back.measure_windows == 8 and back.reasons == [] and back.best is None
    assert back.summary().startswith("certificate: certified: within 1.50 dPPL points")


def test_plausible_sets_ties_the_floor_itself_eligibility_and_extras():
    # equal counts: the smaller set first; a set at exactly the floor is plausible
    counts = {(3, 5): 40, (1, 2): 40, (6, 7): 5, (0, 9): 15}
    sets, mass = plausible_sets((8, 9), counts, floor=0.05, max_sets=3)
    assert sets == [(8, 9), (1, 2), (3, 5)] and mass == pytest.approx(0.20)  # chosen never drawn
    sets, _ = plausible_sets((8, 9), counts, floor=0.05, max_sets=6)
    assert sets == [(8, 9), (1, 2), (3, 5), (0, 9), (6, 7)]
    no_one = lambda s: 1 not in s  # noqa: E731
    sets, mass = plausible_sets((1, 9), counts, floor=0.05, max_sets=6, eligible=no_one)
    assert sets == [(1, 9), (3, 5), (0, 9), (6, 7)] and mass == pytest.approx(0.40)
    # extras: after the bootstrap's, never twice, never past the cap, eligible only
    sets, _ = plausible_sets((2, 4), None, extra=[(4, 2), (1, 5), (6, 8), (7, 9)], max_sets=3,
                             eligible=no_one)  # fmt: skip
    assert sets == [(2, 4), (6, 8), (7, 9)]
    sets, _ = plausible_sets((2, 4), None, extra=[(6, 8), (7, 9)], max_sets=2)
    assert sets == [(2, 4), (6, 8)]


def test_certify_is_its_definition():
    """Every field of the certificate, recomputed here from the definitions in the docstring."""
    from swapprune.stats.bootstrap import resample_indices

    H, B, seed = 12, 300, 5
    rng = np.random.default_rng(9)
    tokens = rng.integers(200, 512, H).astype(float)
    base = 3.0 * tokens + rng.normal(0, 5, H)
    cost = {(3, 5): 0.40, (4, 6): 0.30, (2, 7): 0.38, (1, 2): 0.40, (8, 9): 0.20}
    nll = {s: base + np.log1p(c) * tokens + rng.normal(0, 2, H) for s, c in cost.items()}
    nll[(1, 2)] = nll[(3, 5)].copy()  # the chosen set's twin: never a winner (CI lower end 0)
    sources = {(8, 9): "bi"}  # an independent alternative: measured, never switched to
    got = certify((3, 5), nll, base, tokens, sources=sources, n_boot=B, seed=seed,
                  mass_outside=0.1)  # fmt: skip

    keys = [(3, 5), (4, 6), (2, 7), (1, 2), (8, 9)]
    ch, me = list(range(6)), list(range(6, 12))  # the first half chooses, the rest measures

    def costs(ix, s_):
        idx = resample_indices(len(ix), B, s_)
        t, b = tokens[ix], base[ix]
        point = {s: np.exp((nll[s][ix].sum() - b.sum()) / t.sum()) - 1 for s in keys}
        boot = {s: np.exp((nll[s][ix][idx].sum(1) - b[idx].sum(1)) / t[idx].sum(1)) - 1
                for s in keys}  # fmt: skip
        return point, boot

    pc, bc = costs(ch, seed)
    pm, bm = costs(me, seed + 1)
    own = [(4, 6), (2, 7), (1, 2)]  # a protocol-guided run switches only among its own sets
    level = 0.05 / len(own)
    winners, cis = [], {}
    for s in own:
        lo, hi = np.percentile(100 * (bc[(3, 5)] - bc[s]), [100 * level / 2, 100 * (1 - level / 2)])
        cis[s] = [float(lo), float(hi)]
        if lo > 0:
            winners.append(s)
    kept = min(winners, key=lambda s: (pc[s], s)) if winners else (3, 5)
    regret = 100 * (bm[kept] - np.min(np.stack([bm[s] for s in keys]), axis=0))
    tol = max(1.0, 0.05 * 100 * min(pm.values()))  # anchored on the best of R, not on kept
    r95 = float(np.percentile(regret, 95))
    assert got.kept == list(kept) and got.switched == (kept != (3, 5))
    assert got.gain == pytest.approx(100 * (pc[(3, 5)] - pc[kept]))
    assert got.r95 == pytest.approx(r95) and got.r_stop == pytest.approx(r95)
    assert got.delta == pytest.approx(tol)
    assert got.p_within == pytest.approx(float(np.mean(regret <= tol)))
    assert got.certified == (r95 <= tol) and got.reasons == ([] if r95 <= tol else ["regret"])
    for row, s in zip(got.sets, keys, strict=True):
        assert row["set"] == list(s)
        assert row["cost_points"] == pytest.approx(100 * pm[s])
        assert row["choose_cost_points"] == pytest.approx(100 * pc[s])
        assert row.get("better_than_chosen_ci") == (pytest.approx(cis[s]) if s in cis else None)
    assert [r["source"] for r in got.sets] == [
        "chosen",
        "criterion",
        "criterion",
        "criterion",
        "bi",
    ]
    others = [s for s in keys if s != kept]
    b = min(others, key=lambda s: (pm[s], s))
    assert got.best == {"set": list(b), "source": "bi" if b == (8, 9) else "criterion",
                        "cost_points": pytest.approx(100 * pm[b]),
                        "gain_points": pytest.approx(100 * (pm[kept] - pm[b]))}  # fmt: skip
    assert (got.choose_windows, got.measure_windows, got.windows) == (6, 6, 12)
    assert certify((3, 5), nll, base, tokens) == certify((3, 5), nll, base, tokens, seed=0)
    # futile: an independent set beats the kept one by more than delta at the regret's 5th
    # percentile; delta just below, at and between the 5th and 6th percentiles
    b_src = "bi" if b == (8, 9) else "criterion"
    assert got.futile == (b_src == "bi" and float(np.percentile(regret, 5)) > tol)
    p5, p6 = (float(x) for x in np.percentile(regret, [5, 6]))
    assert b_src == "bi" and p5 < p6

    def futile_at(d):
        return certify((3, 5), nll, base, tokens, sources=sources, n_boot=B, seed=seed,
                       delta=d).futile  # fmt: skip

    assert futile_at(p5 - 1e-9) and not futile_at(p5) and not futile_at((p5 + p6) / 2)


def test_a_regret_exactly_at_the_tolerance_certifies():
    """A set better than every other on every window: its regret is 0, within delta = 0."""
    nll, base, tokens = nll_table({(3, 5): 0.20, (4, 6): 0.60}, noise=0.0)
    cert = certify((3, 5), nll, base, tokens, delta=0.0)
    assert cert.r_stop == 0.0 and cert.certified and cert.p_within == 1.0
    # one challenger: the switch's CI is at alpha itself, not split further
    two = {(3, 5): nll[(4, 6)], (4, 6): nll[(3, 5)]}  # chosen is now the costly one
    lo, _ = certify((3, 5), two, base, tokens).sets[1]["better_than_chosen_ci"]
    assert lo > 0
    # a twin of the chosen set (the same cost on every window) never replaces it
    twin = {(3, 5): nll[(3, 5)], (1, 2): nll[(3, 5)].copy()}
    held = certify((3, 5), twin, base, tokens)
    assert held.kept == [3, 5] and not held.switched


def test_a_stop_the_final_certificate_overrules_is_said_in_the_record():
    """The loop certified its probes' sets, the final certificate (more sets) did not."""
    from swapprune.records import AdaptiveRecord, CertificateSkipped
    from swapprune.select.reference import reconcile_stop

    def loop(stopped: str) -> AdaptiveRecord:
        return AdaptiveRecord(stopped, 8, 40, 32, 0.1, 0.1)

    sets = [{"set": [14, 17]}, {"set": [13, 17]}, {"set": [12, 17]}]
    rec = reconcile_stop(loop("certified"), _cert(certified=False, sets=sets))
    assert rec.final_certified is False
    assert rec.stop_note == (
        "the loop certified against the sets of its last look; the final certificate, over 3 "
        "sets (the kept set's +-1 neighbours, and for auto the beam's set, included), does not"
    )
    assert rec.to_dict()["stop_note"] == rec.stop_note
    # agreement, or a stop on the cap: nothing to explain
    rec = reconcile_stop(loop("certified"), _cert(certified=True, sets=sets))
    assert rec.final_certified is True and "stop_note" not in rec.to_dict()
    rec = reconcile_stop(loop("max windows"), _cert(certified=False, sets=sets))
    assert rec.final_certified is False and rec.stop_note is None
    # no certificate measured (no held-out windows): the record is left as it was
    skipped = CertificateSkipped("no held-out windows")
    assert reconcile_stop(loop("stable"), skipped) == loop("stable")
    assert "final_certified" not in reconcile_stop(loop("stable"), None).to_dict()
    assert reconcile_stop(None, _cert(certified=True)) is None


def test_a_stably_wrong_criterion_is_not_certified_and_bi_is_named():
    """The criterion's plausible sets all cost ~+300%; Block Influence's set costs +50%."""
    costs = {(3, 5): 3.0, (3, 6): 3.05, (2, 5): 3.1, (1, 4): 0.5}
    nll, base, tokens = nll_table(costs, noise=0.01)
    cert = certify((3, 5), nll, base, tokens, sources={(1, 4): "bi"}, mass_outside=0.0)
    # a protocol-guided run does not switch to an independent alternative ...
    assert cert.kept == [3, 5] and not cert.switched
    # ... and is not certified when it is much cheaper
    assert not cert.certified and cert.reasons == ["regret"]
    assert cert.best["set"] == [1, 4] and cert.best["source"] == "bi"
    assert cert.best["gain_points"] == pytest.approx(250, abs=5)
    assert "Block Influence's set [1, 4] costs +49.8% against this cut's +301.0%" in cert.summary()
    # the delta is anchored on the best alternative (+50%: 2.5 points), not on +300%
    assert cert.delta == pytest.approx(2.5, abs=0.1)
    # auto may switch to anything in R: it takes BI's set and is certified
    auto = certify((3, 5), nll, base, tokens, sources={(1, 4): "bi"}, switch_to="reference")
    assert auto.kept == [1, 4] and auto.switched and auto.certified


def _summary_of(cert, cost_warning: bool, protocol="interchange"):
    """The printed summary of a constructed prune run with ``cert`` and a cost record."""
    from pathlib import Path

    from swapprune.cli.summary import print_prune_summary
    from swapprune.config import CostConfig, ExportConfig, ModelConfig, RunConfig
    from swapprune.pipeline.sequence import RunResult
    from swapprune.plan import PrunePlan

    cfg = RunConfig(model=ModelConfig("smollm2-135m"), prune=SelectConfig(budget=2,
                    protocol=protocol), cost=CostConfig(), export=ExportConfig("out"))  # fmt: skip
    plan = PrunePlan.from_removal(10, cert.kept, budget=2, protocol=protocol, strategy="greedy")
    plan.records.certificate = cert
    cost = {"summary": "cost: WikiText-2 perplexity 20 -> 80, dPPL +300.0% [+250%, +350%]"}
    if cost_warning:
        cost["warning"] = "warning: this cut raises perplexity by +300% [+250%, +350%], above +50%"
    res = RunResult(cfg, output=Path("out"), plan=plan, metrics={"cost": cost})
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_prune_summary(res)
    return buf.getvalue().splitlines()


def test_the_summary_has_one_next_line_and_it_names_the_better_set():
    costs = {(3, 5): 3.0, (3, 6): 3.05, (1, 4): 0.5}
    nll, base, tokens = nll_table(costs, noise=0.01)
    cert = certify((3, 5), nll, base, tokens, sources={(1, 4): "bi"})
    lines = _summary_of(cert, cost_warning=True)
    nexts = [line for line in lines if "next:" in line]
    assert len(nexts) == 1 and nexts == [lines[-1]], lines
    # BI's set is cheaper: its criterion, with a linear patch since the cut costs too much
    assert "--protocol bi" in nexts[0] and "--patch linear" in nexts[0] and "--budget 2" in nexts[0]
    assert any("Block Influence's set [1, 4] costs" in line for line in lines)
    # a neighbour (or a landscape set) is produced by auto
    other = certify((3, 5), nll, base, tokens, sources={(1, 4): "neighbour"})
    (line,) = [x for x in _summary_of(other, cost_warning=False) if "next:" in x]
    assert "--protocol auto" in line and "--patch" not in line
    # above the cost warning with no better set known: auto and the patch
    nll, base, tokens = nll_table({(3, 5): 3.0, (3, 6): 3.0}, noise=0.001)
    fine = certify((3, 5), nll, base, tokens)
    assert fine.certified
    (line,) = [x for x in _summary_of(fine, cost_warning=True) if "next:" in x]
    assert "--protocol auto" in line and "--patch linear" in line
    # a certified cut below the warning: evaluate it
    (line,) = [x for x in _summary_of(fine, cost_warning=False) if "next:" in x]
    assert line.startswith("next: swapprune eval ")


def test_delta_does_not_grow_when_every_plausible_set_gets_worse():
    """Shifting every set of A up by the same cost leaves delta where the best alternative is."""
    good = {(3, 5): 0.30, (3, 6): 0.32, (1, 4): 0.20}
    worse = {(3, 5): 1.30, (3, 6): 1.32, (1, 4): 0.20}  # A worse by 100 points, BI as it was
    d = []
    for costs in (good, worse):
        nll, base, tokens = nll_table(costs, noise=0.0)
        d.append(certify((3, 5), nll, base, tokens, sources={(1, 4): "bi"}).delta)
    assert d[0] == pytest.approx(d[1]) == pytest.approx(1.0)  # max(1, 5% of 20 points)
    # with the kept set the best of R, its own cost is the anchor: 5% of +130% then
    nll, base, tokens = nll_table({(3, 5): 1.30, (3, 6): 1.32}, noise=0.0)
    assert certify((3, 5), nll, base, tokens).delta == pytest.approx(6.5, rel=1e-6)


def test_a_certificate_with_too_much_bootstrap_outside_is_not_certified():
    nll, base, tokens = nll_table({(3, 5): 0.30, (4, 6): 0.30}, noise=0.002)
    ok = certify((3, 5), nll, base, tokens, mass_outside=0.10)
    assert ok.certified
    out = certify((3, 5), nll, base, tokens, mass_outside=0.11)
    assert not out.certified and out.reasons == ["mass"] and out.r_stop <= out.delta
    assert "11% of the selection's bootstrap fell outside" in out.summary()
    # a selection that cannot be resampled has no mass: only the regret decides
    assert certify((3, 5), nll, base, tokens, mass_outside=None).certified


def test_the_switch_is_chosen_on_one_half_and_the_regret_measured_on_the_other():
    """A challenger better only on the measuring windows is not switched to, and the reverse."""
    nll, base, tokens = nll_table({(3, 5): 0.40, (4, 6): 0.40}, noise=0.0)
    choose, measure = split_windows(H)
    assert set(choose).isdisjoint(measure) and sorted(choose + measure) == list(range(H))
    late = {k: v.copy() for k, v in nll.items()}
    late[(4, 6)][measure] -= 0.2 * tokens[measure]  # cheaper where the regret is measured
    cert = certify((3, 5), late, base, tokens)
    assert not cert.switched and not cert.certified  # it shows as regret, not as a switch
    early = {k: v.copy() for k, v in nll.items()}
    early[(4, 6)][choose] -= 0.2 * tokens[choose]  # cheaper where the choice is made
    cert = certify((3, 5), early, base, tokens)
    assert cert.switched and cert.kept == [4, 6]
    with pytest.raises(ValueError, match="disjoint"):
        certify((3, 5), nll, base, tokens, choose=[0, 1, 2], measure=[2, 3, 4])


def test_the_choosing_and_measuring_windows_share_no_tokens():
    """On real held-out windows: the two halves are different spans of the text."""
    tok = tiny_tokenizer()
    scoring = load_calibration(tok, None, prompts=8, tokens=32, seed=0)
    held = heldout_windows(tok, None, 8, 64, 0, [scoring])
    choose, measure = split_windows(held.input_ids.shape[0])
    spans_c = [held.spans[i] for i in choose]
    spans_m = [held.spans[i] for i in measure]
    for a0, a1 in spans_c:
        for b0, b1 in spans_m:
            assert a1 <= b0 or b1 <= a0  # no token position in both
    rows_c = {tuple(held.input_ids[i].tolist()) for i in choose}
    rows_m = {tuple(held.input_ids[i].tolist()) for i in measure}
    assert not rows_c & rows_m


def test_neighbours_move_one_block_within_the_constraints():
    from swapprune.select.reference import shifted_sets

    cons = Constraints(10, protect_first=1, protect_last=1)
    assert shifted_sets([1, 5], cons) == [(2, 5), (1, 4), (1, 6)]  # 0 is protected
    assert shifted_sets([4, 5], cons) == [(3, 5), (4, 6)]  # onto a removed block: no
    assert shifted_sets([1, 5], cons, ok=lambda s: 6 not in s) == [(2, 5), (1, 4)]


def test_the_loop_stops_when_an_independent_alternative_is_clearly_cheaper():
    """More windows refine the criterion's own sets; they cannot close a gap to BI's set."""

    def judge(scores, stability, look, n_looks):
        chosen = tuple(stability["interchange"].chosen)
        costs = {chosen: 2.0, (0, 11): 0.3}  # BI's set, far cheaper on held-out windows
        nll, base, tokens = nll_table(costs, noise=0.01, seed=look)
        cert = certify(chosen, nll, base, tokens, sources={(0, 11): "bi"},
                       quantile=spending_quantile(n_looks))  # fmt: skip
        return {"certified": cert.certified, "futile": cert.futile}

    res, calls = _run(judge)
    assert res.stopped == "futile" and len(res.rounds) == 1 and len(calls) == 1
    # a gap within the noise is not futile: the loop goes on
    nll, base, tokens = nll_table({(1, 2): 0.31, (3, 4): 0.30}, noise=0.05)
    assert not certify((1, 2), nll, base, tokens, sources={(3, 4): "bi"}).futile
    # nor is a cheaper set of the criterion's own (more windows may make it the choice)
    nll, base, tokens = nll_table({(1, 2): 2.0, (3, 4): 0.3}, noise=0.01)
    assert not certify((1, 2), nll, base, tokens).futile


# -- the record --------------------------------------------------------------------------
def test_a_certificate_reads_back_from_its_record_field_for_field():
    from swapprune.select.certificate import Certificate

    cert = _cert(chosen=[2, 5], switched=True, gain=2.5, quantile=0.99, r_stop=0.75,
                 p_within=0.875, certified=False, mass_outside=0.125,
                 plausible_from="neighbours", windows=10, tokens=5110, n_boot=500, seed=7,
                 choose_windows=5, measure_windows=5, switch_among="reference",
                 mass_gate=0.2, reasons=["regret", "mass"],
                 best={"set": [1, 5], "source": "bi", "cost_points": 12.0, "gain_points": 18.0},
                 scope="the evaluation text", futile=True,
                 extra={"compute": {"block_tokens": 12}})  # fmt: skip
    d = cert.to_dict()
    assert Certificate.from_dict(d) == cert
    assert Certificate.from_dict({**d, "summary": cert.summary()}) == cert  # the line is not kept


def test_a_record_written_before_the_split_reads_with_the_old_meanings():
    from swapprune.select.certificate import MASS_GATE, Certificate
    from swapprune.stats import LEVEL, N_BOOT

    old = {"chosen": [3, 5], "kept": [3, 5], "switched": False, "gain_points": 0.0,
           "sets": [{"set": [3, 5], "cost_points": 30.0}], "r95_points": 0.5,
           "p_within_delta": 0.9, "delta_points": 1.5, "certified": True,
           "heldout": {"windows": 8, "tokens": 4088}}  # fmt: skip
    c = Certificate.from_dict(old)
    assert (c.quantile, c.r_stop, c.mass_outside, c.plausible_from) == (
        LEVEL,
        0.5,
        None,
        "bootstrap",
    )
    assert (c.windows, c.tokens, c.choose_windows, c.measure_windows) == (8, 4088, 0, 8)
    assert (c.n_boot, c.seed, c.switch_among, c.mass_gate) == (N_BOOT, 0, "own", MASS_GATE)
    assert (c.reasons, c.best, c.scope, c.futile, c.extra) == ([], None, "", False, {})


def test_next_choices_rule_out_one_chosen_block_at_a_time():
    from swapprune.select.reference import next_choices

    cons = Constraints(num_layers=8, protect_first=1, protect_last=1)
    spec = _spec(cons)
    # importance: lower is more removable; blocks 4 and 2 are chosen, 4 the least removable
    imp = [None, 5.0, 1.0, 6.0, 2.0, 3.0, 4.0, None]
    plan = SimpleNamespace(removed=[2, 4], scores={"importance": imp})
    assert next_choices(spec, plan, 3) == [(2, 5), (4, 5)]
    assert next_choices(spec, plan, 1) == [(2, 5)]
    plan_short = SimpleNamespace(removed=[2, 4], scores={"importance": imp[:-1]})
    assert next_choices(spec, plan_short, 3) == []
    assert next_choices(spec, SimpleNamespace(removed=[2, 4], scores={}), 3) == []


def _spec(cons, strategy="ranked", budget=2, **kw):
    strat = get_strategy(strategy) if isinstance(strategy, str) else strategy
    return SimpleNamespace(num_layers=cons.num_layers, budget=budget, constraints=cons,
                           strategy=strat, **kw)  # fmt: skip


def test_next_choices_follow_the_tiebreak():
    from swapprune.select.reference import next_choices

    cons = Constraints(num_layers=8, protect_first=1, protect_last=1)
    imp = [None, 1.0, 1.0, 1.0, 1.0, 9.0, 9.0, None]
    tb = [None, None, 3.0, 2.0, 1.0, 0.0, 0.0, None]  # 4, then 3, then 2 go first; 1 last
    plan = SimpleNamespace(removed=[3, 4], scores={"importance": imp, "tiebreak": {"values": tb}})
    assert next_choices(_spec(cons), plan, 3) == [(2, 4), (2, 3)]
    untied = SimpleNamespace(removed=[3, 4], scores={"importance": imp})
    assert next_choices(_spec(cons), untied, 3) == [(1, 2)]  # by index: 1, 2 both times


def test_next_choices_rank_for_a_strategy_that_queries_the_model_and_skip_a_failed_choice():
    from swapprune.select.reference import next_choices

    cons = Constraints(num_layers=8, protect_first=1, protect_last=1)
    imp = [None, 5.0, 1.0, 6.0, 2.0, 3.0, 4.0, None]
    plan = SimpleNamespace(removed=[2, 4], scores={"importance": imp})

    def refuses(inputs):
        raise RuntimeError("no oracle here")

    querying = SimpleNamespace(queries_model=True, choose=refuses)
    assert next_choices(_spec(cons, querying), plan, 3) == [(2, 5), (4, 5)]

    ranked = get_strategy("ranked")

    def fails_without_4(inputs):  # block 4 is ruled out first (the least removable)
        if np.isinf(inputs.importance[4]):
            raise RuntimeError("cannot choose")
        return ranked.choose(inputs)

    picky = SimpleNamespace(queries_model=False, choose=fails_without_4)
    assert next_choices(_spec(cons, picky), plan, 3) == [(4, 5)]


def test_next_choices_leave_out_the_kept_set_and_sets_with_unmeasured_blocks():
    from swapprune.select.reference import next_choices

    cons = Constraints(num_layers=5, protect_first=1, protect_last=1)
    plan = SimpleNamespace(removed=[1, 2], scores={"importance": [None, 1.0, 2.0, None, None]})
    assert next_choices(_spec(cons), plan, 3) == []  # (1, 3) needs block 3, never measured


def test_next_choices_keep_the_serving_constraint_on_the_banned_importance():
    from test_serve_select import gemma3

    from swapprune.select.constraints import resolve
    from swapprune.select.reference import next_choices
    from swapprune.serving.phase import eligible_removals

    serve = resolve(["llama.cpp"], gemma3(12))
    cons = Constraints(12, serve=serve)
    imp = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 0.05, 1.1]
    tb = [0.0] * 12
    tb[8], tb[9] = 0.5, 0.25
    imp[6] = imp[7] = 2.0
    imp[8] = imp[9] = 0.9  # tied: the tie-break takes 9
    plan = SimpleNamespace(removed=[10, 11], scores={"importance": imp, "tiebreak": {"values": tb}})
    got = next_choices(_spec(cons), plan, 3)
    # the literal rule: ban one kept block (least removable first), rank, then the
    # cheapest in-phase set under the banned importance and the tie-break
    sets = list(eligible_removals(serve.types, 2, list(serve.rules), []))
    want = []
    for b in sorted(plan.removed, key=lambda b: -imp[b]):
        banned = np.array(imp)
        banned[b] = np.inf
        pick = sorted(np.argsort(banned, kind="stable")[:2].tolist())
        if not serve.in_phase(pick):
            pick = min(sets, key=lambda s: (banned[list(s)].sum(), np.array(tb)[list(s)].sum(), s))
        pick = tuple(int(x) for x in pick)
        if pick != (10, 11) and pick not in want and np.isfinite(banned[list(pick)]).all():
            want.append(pick)
    assert got == want == [(9, 11)]  # banning 11 leaves no in-phase set of measured blocks


def test_plausible_sets_come_from_the_bootstrap_or_the_next_choices(monkeypatch):
    from swapprune.select import reference
    from swapprune.select.certificate import plausible_sets

    cons = Constraints(num_layers=8, protect_first=1, protect_last=1)
    serve = SimpleNamespace(in_phase=lambda s: 6 not in s)
    spec = _spec(cons, n_boot=123, seed=7, certify_floor=0.2, certify_sets=3, serve=serve)
    imp = [None, 5.0, 1.0, 6.0, 2.0, 3.0, 4.0, None]
    plan = SimpleNamespace(removed=[2, 4], scores={"importance": imp})
    counts = {(2, 4): 50, (2, 6): 30, (4, 5): 25, (1, 2): 5}
    calls = []

    def stability(*args):
        calls.append(args)
        return SimpleNamespace(counts=counts)

    monkeypatch.setattr(reference, "plan_stability", stability)
    scores = object()
    sets, got_counts, how = reference.plausible(spec, plan, scores, extra=[(3, 4)])
    assert calls == [(plan, scores, cons, 123, 7)]
    # (2, 6) is out of phase, (1, 2) under the floor of 20%
    assert (sets, got_counts, how) == ([(2, 4), (4, 5), (3, 4)], counts, "bootstrap")
    assert sets == plausible_sets([2, 4], counts, 0.2, 3, [(3, 4)], serve.in_phase)[0]

    monkeypatch.setattr(reference, "plan_stability", lambda *a: None)
    sets, got_counts, how = reference.plausible(spec, plan, scores, extra=[(1, 4)])
    # the next choices: (2, 5) then (4, 5); with (1, 4) first, the cap of 3 keeps (2, 5)
    assert (sets, got_counts, how) == ([(2, 4), (1, 4), (2, 5)], None, "neighbours")
    assert reference.plausible(spec, plan, scores)[0] == [(2, 4), (2, 5), (4, 5)]
    # budget 3: the next choices (2, 4, 6), (2, 5, 6) are out of phase here; the cap less
    # one are asked for, so none is left
    no_pair = SimpleNamespace(in_phase=lambda s: not {2, 6} <= set(s))
    spec3 = _spec(cons, budget=3, n_boot=123, seed=7, certify_floor=0.2, certify_sets=3,
                  serve=no_pair)  # fmt: skip
    plan3 = SimpleNamespace(removed=[2, 4, 5], scores={"importance": imp})
    assert reference.plausible(spec3, plan3, scores) == ([(2, 4, 5)], None, "neighbours")


def test_eligible_sets_are_those_in_phase_under_serve():
    from swapprune.select.reference import eligible

    serve = SimpleNamespace(in_phase=lambda s: True)
    assert eligible(SimpleNamespace(serve=serve)) is serve.in_phase
    assert eligible(SimpleNamespace(serve=None)) is None


def test_the_independent_sets_by_source(monkeypatch):
    from swapprune.select import reference

    seen = []
    monkeypatch.setattr(reference, "bi_choice", lambda *a: seen.append(("bi", a)) or (3, 5))
    monkeypatch.setattr(reference, "other_choice",
                        lambda *a: seen.append(("other", a)) or ("replacement", (2, 5)))  # fmt: skip
    spec = SimpleNamespace(landscape=[[5, 3], [6, 1], [1, 6]])
    model, calib, scores, held = object(), object(), object(), object()
    got = reference.independent_sets(model, spec, calib, scores, held)
    assert got == {(3, 5): "bi", (2, 5): "other protocol", (1, 6): "landscape"}
    assert list(got) == [(3, 5), (2, 5), (1, 6)]
    assert seen == [("bi", (model, spec, calib, held)), ("other", (model, spec, calib, scores))]
    monkeypatch.setattr(reference, "bi_choice", lambda *a: None)
    monkeypatch.setattr(reference, "other_choice", lambda *a: ("replacement", (3, 5)))
    assert reference.independent_sets(model, spec, calib, scores, held) == {
        (3, 5): "other protocol", (1, 6): "landscape"
    }  # fmt: skip
    monkeypatch.setattr(reference, "other_choice", lambda *a: None)
    assert (
        reference.independent_sets(model, SimpleNamespace(landscape=[]), calib, scores, held) == {}
    )


def test_certify_reads_its_inputs_in_float64_and_checks_its_windows():
    """float32 holds, given index lists, the defaults it records, and its refusals."""
    nll, base, tokens = nll_table({(3, 5): 0.30, (4, 6): 0.28, (2, 7): 0.45}, noise=0.02)
    ref = certify((3, 5), nll, base, tokens, n_boot=200)
    # float32 inputs (as a bf16 or float32 model gives them) are computed in float64
    as32 = {s: np.asarray(v, np.float32).astype(np.float64) for s, v in nll.items()}
    b32, t32 = np.asarray(base, np.float32), np.asarray(tokens, np.float32)
    want = certify((3, 5), as32, b32.astype(np.float64), t32.astype(np.float64), n_boot=200)
    got = certify((3, 5), {s: np.asarray(v, np.float32) for s, v in nll.items()}, b32, t32,
                  n_boot=200)  # fmt: skip
    assert got == want
    assert (ref.plausible_from, ref.scope) == ("bootstrap", "")
    h = len(base)
    half = list(range(h // 2))
    rest = list(range(h // 2, h))
    assert certify((3, 5), nll, base, tokens, n_boot=200, choose=half, measure=rest) == ref
    # one of the two alone is not a split: the default one is used
    assert certify((3, 5), nll, base, tokens, n_boot=200, choose=rest) == ref
    assert certify((3, 5), nll, base, tokens, n_boot=200, measure=half) == ref
    with pytest.raises(
        ValueError, match="^the choosing and the measuring windows must be disjoint$"
    ):
        certify((3, 5), nll, base, tokens, choose=[0, 1], measure=[1, 2])
    with pytest.raises(ValueError, match="^switch_to must be 'own' or 'reference', got 'all'$"):
        certify((3, 5), nll, base, tokens, switch_to="all")


class _FakeOracle:
    """Per-window mean NLL of each removal set from a table (what a CalibrationOracle gives)."""

    def __init__(self, windows: int, length: int, per_token: dict, base: np.ndarray):
        self.input_ids = np.zeros((windows, length), dtype=int)
        self.per_token, self.base = per_token, base
        self.asked: list = []

    def window_costs(self, removed, metric):
        assert metric == "ppl"
        self.asked.append(tuple(removed))
        return self.base + self.per_token.get(tuple(removed), 0.0)

    def window_costs_many(self, sets, metric):
        return [self.window_costs(s, metric) for s in sets]


def test_the_reference_certificate_is_certify_over_the_sources_it_gathers():
    from swapprune.select import reference

    H, L = 8, 65  # 64 scored tokens per window
    rng = np.random.default_rng(3)
    base = 3.0 + rng.normal(0, 0.2, H)
    extra = {(): 0.0, (3, 5): 0.30, (2, 5): 0.32, (1, 4): 0.20, (1, 2, 3): 0.05, (6, 7): 0.5,
             (2, 6): 0.9, (4, 5): 0.31, (3, 6): 0.29, (3, 4): 0.6}  # fmt: skip
    per_token = {s: v + rng.normal(0, 0.01, H) for s, v in extra.items()}
    per_token[()] = np.zeros(H)  # the unpruned model
    certify_o = _FakeOracle(H, L, per_token, base)
    # on the screening windows (3, 6) looks best and (3, 4) second: they are carried
    screen_o = _FakeOracle(2, L, {(3, 6): 0.0, (3, 4): 0.1, (2, 5): 0.2, (4, 5): 0.3,
                                  (3, 5): 0.4}, base[:2])  # fmt: skip
    held = reference.Heldout(certify=None, scope="the calibration text (x)")
    held._oracles = {"certify": certify_o, "screen": screen_o}
    cons = Constraints(num_layers=8, protect_first=1, protect_last=1)
    spec = SimpleNamespace(constraints=cons, serve=SimpleNamespace(in_phase=lambda s: 7 not in s),
                           batch_size=4, certify_delta=None, n_boot=200, seed=3)  # fmt: skip
    independents = {(4, 1): "bi", (1, 2, 3): "landscape", (6, 7): "other protocol",
                    (5, 3): "bi"}  # fmt: skip
    got = reference.reference_certificate(None, spec, held, [5, 3], [(3, 5), (5, 2)], independents,
                                          counts={(3, 5): 8, (2, 5): 1, (2, 6): 1})  # fmt: skip
    tokens = np.full(H, L - 1, dtype=float)
    nll = {s: (base + per_token[s]) * tokens for s in [(3, 5), (2, 5), (1, 4)]}
    first = certify((3, 5), nll, base * tokens, tokens, sources={(1, 4): "bi"}, n_boot=200, seed=3)
    assert first.kept == [3, 5]  # no neighbour of (3, 5) is in R yet
    # the neighbours of the kept set, ranked on the screen: (3, 6), (3, 4) carried
    moved = reference.shifted_sets([3, 5], cons, spec.serve.in_phase)
    assert (3, 6) in moved and (3, 4) in moved
    nll |= {s: (base + per_token[s]) * tokens for s in [(3, 6), (3, 4)]}
    sources = {(1, 4): "bi", (3, 6): "neighbour", (3, 4): "neighbour"}
    # (4, 5) is screened (0.3 nats above the best screened neighbour) but not carried
    assert got.screened[0]["screen_cost_points"] == pytest.approx(100 * np.expm1(0.3), rel=1e-12)
    out = [{"set": [4, 5], "source": "neighbour",
            "screen_cost_points": got.screened[0]["screen_cost_points"]}]  # fmt: skip
    want = certify((3, 5), nll, base * tokens, tokens, sources=sources, n_boot=200, seed=3,
                   mass_outside=1 - 9 / 10, plausible_from="bootstrap",
                   scope="the calibration text (x)", screened=out, screen_windows=2)  # fmt: skip
    assert got == want
    assert [r["source"] for r in got.sets] == [
        "chosen",
        "criterion",
        "bi",
        "neighbour",
        "neighbour",
    ]
    # (1, 2, 3) has the wrong size and (6, 7) is out of phase: neither is measured
    assert (1, 2, 3) not in certify_o.asked and (6, 7) not in certify_o.asked
    # without the neighbours
    held2 = reference.Heldout(certify=None, scope="the calibration text (x)")
    held2._oracles = {"certify": _FakeOracle(H, L, per_token, base), "screen": screen_o}
    plain = reference.reference_certificate(None, spec, held2, [3, 5], [(3, 5), (2, 5)],
                                            independents, near=False)  # fmt: skip
    assert [r["set"] for r in plain.sets] == [[3, 5], [2, 5], [1, 4]]
    assert plain.mass_outside is None and plain.plausible_from == "bootstrap"
    # what the spec and the caller set reaches certify; neighbours obey the phase too
    spec.certify_delta = 7.5
    spec.serve = SimpleNamespace(in_phase=lambda s: 6 not in s)
    held3 = reference.Heldout(certify=None, scope="the calibration text (x)")
    held3._oracles = {"certify": _FakeOracle(H, L, per_token, base), "screen": screen_o}
    set3 = reference.reference_certificate(None, spec, held3, [3, 5], [(3, 5)], independents,
                                           plausible_from="neighbours", quantile=0.99)  # fmt: skip
    assert (set3.delta, set3.plausible_from, set3.quantile) == (7.5, "neighbours", 0.99)
    assert set3.kept == [3, 5] and [3, 6] not in [r["set"] for r in set3.sets]
    # (3, 4) is within CARRY_NATS of the best screened set ((1, 4), 0 nats), (2, 5) is not
    assert [r["set"] for r in set3.sets if r["source"] == "neighbour"] == [[3, 4]]
    assert [r["set"] for r in set3.screened] == [[2, 5], [4, 5]]
    held4 = reference.Heldout(certify=None, scope="")
    held4._oracles = {"certify": _FakeOracle(H, L, per_token, base), "screen": screen_o}
    anything = reference.reference_certificate(None, spec, held4, [3, 5], [(3, 5)], independents,
                                               switch_to="reference", near=False)  # fmt: skip
    assert anything.switch_among == "reference"


def test_certify_records_what_it_was_given():
    from swapprune.stats.bootstrap import resample_indices

    nll, base, tokens = nll_table({(3, 5): 0.300, (4, 6): 0.295, (2, 7): 0.45}, noise=0.002)
    alone = certify((3, 5), {(3, 5): nll[(3, 5)]}, base, tokens, n_boot=100)
    assert alone.best is None and not alone.futile and alone.kept == [3, 5]
    c = certify((3, 5), nll, base, tokens, switch_to="reference", quantile=0.99, n_boot=123,
                seed=4, mass_outside=0.15, mass_gate=0.2, plausible_from="neighbours",
                scope="the calibration text (x)")  # fmt: skip
    assert (c.quantile, c.n_boot, c.seed, c.switch_among, c.mass_gate) == (
        0.99,
        123,
        4,
        "reference",
        0.2,
    )
    assert (c.plausible_from, c.scope, c.mass_outside) == ("neighbours", "the calibration text (x)",
                                                           0.15)  # fmt: skip
    assert c.tokens == int(tokens.sum()) and c.windows == len(base)
    regret = _regret(c, nll, base, tokens)
    assert c.r_stop == pytest.approx(float(np.percentile(regret, 99)))
    assert c.r95 == pytest.approx(float(np.percentile(regret, 95)))
    # (4, 6) is cheaper by about half a point on every window: a challenger whose CI's
    # lower end lies between 0 and 1 point still wins
    lo, hi = c.sets[1]["better_than_chosen_ci"]
    assert 0 < lo < 1 and c.switched and c.kept == [4, 6]
    # one challenger: its CI is at alpha itself, from the choosing windows' resamples
    ch = list(range(len(base) // 2))
    idx = resample_indices(len(ch), 123, 4)

    def boot(s):
        t, bb = tokens[ch][idx].sum(1), base[ch][idx].sum(1)
        return np.exp((nll[s][ch][idx].sum(1) - bb) / t) - 1

    one = certify((3, 5), {s: nll[s] for s in [(3, 5), (4, 6)]}, base, tokens, n_boot=123, seed=4)
    want = np.percentile(100 * (boot((3, 5)) - boot((4, 6))), [2.5, 97.5])
    assert one.sets[1]["better_than_chosen_ci"] == pytest.approx(list(want))


def _regret(cert, nll, base, tokens):
    """The regret replicates of ``cert`` recomputed from the definition (measuring half)."""
    from swapprune.stats.bootstrap import resample_indices

    me = list(range(len(base) // 2, len(base)))
    idx = resample_indices(len(me), cert.n_boot, cert.seed + 1)
    t, bb = tokens[me][idx].sum(1), base[me][idx].sum(1)
    boot = {tuple(r["set"]): np.exp((nll[tuple(r["set"])][me][idx].sum(1) - bb) / t) - 1
            for r in cert.sets}  # fmt: skip
    best = np.min(np.stack(list(boot.values())), axis=0)
    return 100 * (boot[tuple(cert.kept)] - best)


def test_too_few_windows_to_split_is_said_in_words():
    from swapprune.select.certificate import MIN_WINDOWS

    assert split_windows(MIN_WINDOWS) == (list(range(MIN_WINDOWS // 2)),
                                          list(range(MIN_WINDOWS // 2, MIN_WINDOWS)))  # fmt: skip
    with pytest.raises(ValueError) as e:
        split_windows(MIN_WINDOWS - 1)
    assert str(e.value) == (
        f"the certificate needs at least {MIN_WINDOWS} held-out windows, got {MIN_WINDOWS - 1}"
    )


def test_carried_keeps_the_sets_near_the_best_and_near_the_best_own_set():
    from swapprune.select.reference import CARRY_NATS, carried

    screened = {(1, 2): 0.50, (2, 3): 0.55, (3, 4): 0.65, (4, 5): 1.40, (5, 6): 1.45, (6, 7): 2.0}
    assert carried(screened) == {(1, 2), (2, 3)}
    # (4, 5) and (5, 6) are the criterion's own: the best of them and those near it go on
    assert carried(screened, own={(4, 5), (5, 6), (6, 7)}) == {(1, 2), (2, 3), (4, 5), (5, 6)}
    assert carried(screened, margin=0.2) == {(1, 2), (2, 3), (3, 4)}
    assert carried({(1, 2): 1.0, (2, 3): 1.0 + CARRY_NATS}) == {(1, 2), (2, 3)}  # inclusive
    assert carried({}) == set()


def test_the_screen_leaves_the_certificate_as_the_full_measurement_gives_it():
    """Sets far above the best are screened out: the certificate (kept set, regret, delta,
    the switch's intervals) is the one measuring every set gives, for less work."""
    from swapprune.select import reference

    H, L = 8, 65
    rng = np.random.default_rng(5)
    base = 3.0 + rng.normal(0, 0.2, H)
    extra = {(3, 5): 0.30, (2, 5): 0.29, (2, 6): 0.9, (1, 6): 1.1, (1, 4): 0.20, (4, 6): 0.8}
    per_token = {s: v + rng.normal(0, 0.01, H) for s, v in extra.items()}
    per_token[()] = np.zeros(H)
    screen = {s: float(np.mean(per_token[s][:2])) for s in extra} | {(): 0.0}
    cons = Constraints(num_layers=8, protect_first=1, protect_last=1)
    spec = SimpleNamespace(constraints=cons, serve=None, batch_size=4, certify_delta=None,
                           n_boot=300, seed=2)  # fmt: skip
    own = [(3, 5), (2, 5), (2, 6), (1, 6)]
    counts = {(3, 5): 5, (2, 5): 3, (2, 6): 1, (1, 6): 1}
    for switch_to in ("own", "reference"):
        held = reference.Heldout(certify=None, scope="x")
        certify_o = _FakeOracle(H, L, per_token, base)
        held._oracles = {"certify": certify_o, "screen": _FakeOracle(2, L, screen, base[:2])}
        got = reference.reference_certificate(None, spec, held, [3, 5], own,
                                              {(1, 4): "bi", (4, 6): "other protocol"},
                                              counts=counts, switch_to=switch_to,
                                              near=False)  # fmt: skip
        # (2, 6), (1, 6) and (4, 6) are >= 0.5 nats above the best: never measured in full
        gone = {(2, 6), (1, 6), (4, 6)}
        assert {tuple(r["set"]) for r in got.screened} == gone
        assert not gone & set(certify_o.asked)
        tokens = np.full(H, L - 1, dtype=float)
        nll = {s: (base + per_token[s]) * tokens for s in extra}
        srcs = {(1, 4): "bi", (4, 6): "other protocol"}
        full = certify((3, 5), nll, base * tokens, tokens, sources=srcs, switch_to=switch_to,
                       n_boot=300, seed=2, mass_outside=0.0, scope="x")  # fmt: skip
        assert (got.kept, got.switched, got.r95, got.r_stop, got.delta, got.certified,
                got.best, got.mass_outside, got.p_within) == (
            full.kept, full.switched, full.r95, full.r_stop, full.delta, full.certified,
            full.best, full.mass_outside, full.p_within)  # fmt: skip
        rows = {tuple(r["set"]): r for r in full.sets}
        assert got.sets == [rows[tuple(r["set"])] for r in got.sets]
        assert "3 more screened out on 2 windows" in got.summary()
        assert "3 more cuts were screened out on 2 of the choosing windows" in got.paragraph()
        assert Certificate.from_dict(got.to_dict()) == got  # the record keeps them
