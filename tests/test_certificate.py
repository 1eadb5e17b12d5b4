"""The regret certificate: ties certify, a better challenger wins, held-out windows stay held out."""

from __future__ import annotations

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
from swapprune.select.certificate import certify, plausible_sets, spending_quantile
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
        ({"heldout_prompts": 1}, "heldout_prompts must be >= 2"),
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

    fields = dict(chosen=[3, 5], kept=[3, 5], switched=False, gain=0.0, sets=[{"set": [3, 5]}],
                  r95=0.25, quantile=0.95, r_stop=0.25, p_within=0.99, delta=1.5, certified=True,
                  mass_outside=None, plausible_from="bootstrap", windows=8, tokens=4088,
                  n_boot=1000, seed=0)  # fmt: skip
    return Certificate(**(fields | kw))


def test_the_certificate_line_says_what_was_shown():
    assert _cert().summary() == (
        "certificate: certified: regret R95 0.25 dPPL points (<= 1.50 with P 0.99) against "
        "1 plausible sets, on 8 held-out windows"
    )
    line = _cert(certified=False, switched=True, kept=[4, 6], gain=2.345, mass_outside=0.12)
    assert line.summary() == (
        "certificate: NOT certified: regret R95 0.25 dPPL points (<= 1.50 with P 0.99) against "
        "1 plausible sets, 12% of the bootstrap outside them, on 8 held-out windows; "
        "[3, 5] -> [4, 6] (challenger better by 2.35 points)"
    )


def test_the_certificate_record():
    d = _cert(extra={"looks": 2}).to_dict()
    assert d == {
        "chosen": [3, 5], "kept": [3, 5], "switched": False, "gain_points": 0.0,
        "sets": [{"set": [3, 5]}], "r95_points": 0.25, "stop_quantile": 0.95,
        "r_stop_points": 0.25, "p_within_delta": 0.99, "delta_points": 1.5, "certified": True,
        "mass_outside": None, "plausible_from": "bootstrap",
        "heldout": {"windows": 8, "tokens": 4088},
        "bootstrap": {"resamples": 1000, "seed": 0, "unit": "held-out window"}, "looks": 2,
    }  # fmt: skip


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
    cost = {(3, 5): 0.40, (4, 6): 0.30, (2, 7): 0.38, (1, 2): 0.40}
    nll = {s: base + np.log1p(c) * tokens + rng.normal(0, 2, H) for s, c in cost.items()}
    nll[(1, 2)] = nll[(3, 5)].copy()  # the chosen set's twin: never a winner (CI lower end 0)
    got = certify((3, 5), nll, base, tokens, n_boot=B, seed=seed, mass_outside=0.1)

    idx = resample_indices(H, B, seed)
    keys = [(3, 5), (4, 6), (2, 7), (1, 2)]
    point = {s: np.exp((nll[s].sum() - base.sum()) / tokens.sum()) - 1 for s in keys}
    boot = {
        s: np.exp((nll[s][idx].sum(axis=1) - base[idx].sum(axis=1)) / tokens[idx].sum(axis=1)) - 1
        for s in keys
    }
    level = 0.05 / 3
    rows, winners = [{"set": [3, 5], "cost_points": 100 * point[(3, 5)]}], []
    for s in keys[1:]:
        lo, hi = np.percentile(
            100 * (boot[(3, 5)] - boot[s]), [100 * level / 2, 100 * (1 - level / 2)]
        )
        rows.append({"set": list(s), "cost_points": 100 * point[s],
                     "better_than_chosen_ci": [float(lo), float(hi)]})  # fmt: skip
        if lo > 0:
            winners.append(s)
    assert winners == [(4, 6), (2, 7)]  # (1, 2) ties exactly: its lower end is 0
    kept = (4, 6)
    regret = 100 * (boot[kept] - np.min(np.stack([boot[s] for s in keys]), axis=0))
    tol = max(1.0, 0.05 * 100 * point[kept])
    record = got.to_dict()
    for have, want in zip(record.pop("sets"), rows, strict=True):
        assert have["set"] == want["set"] and have["cost_points"] == pytest.approx(
            want["cost_points"]
        )
        assert have.get("better_than_chosen_ci") == (
            pytest.approx(want["better_than_chosen_ci"])
            if "better_than_chosen_ci" in want
            else None
        )
    assert record == {
        "chosen": [3, 5], "kept": [4, 6], "switched": True,
        "gain_points": pytest.approx(100 * (point[(3, 5)] - point[kept])),
        "r95_points": pytest.approx(float(np.percentile(regret, 95))), "stop_quantile": 0.95,
        "r_stop_points": pytest.approx(float(np.percentile(regret, 95))),
        "p_within_delta": pytest.approx(float(np.mean(regret <= tol))),
        "delta_points": pytest.approx(tol), "certified": bool(np.percentile(regret, 95) <= tol),
        "mass_outside": 0.1, "plausible_from": "bootstrap",
        "heldout": {"windows": H, "tokens": int(tokens.sum())},
        "bootstrap": {"resamples": B, "seed": seed, "unit": "held-out window"},
    }  # fmt: skip
    assert certify((3, 5), nll, base, tokens) == certify((3, 5), nll, base, tokens, seed=0)


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
    assert "over 3 sets" in rec.stop_note and "does not" in rec.stop_note
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
