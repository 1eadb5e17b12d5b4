"""The scores artifact pinned number by number: every bootstrap interval, rank interval and
summary field is recomputed here with plain numpy from the same resample indices."""

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from swapprune.engine.scores import ScoreResult
from swapprune.errors import SwappruneError
from swapprune.select.regime import regime
from swapprune.stats.bootstrap import resample_indices

N_BOOT = 300
SEED = 7  # not the default seed (0): a dropped seed changes every interval

# Six windows; replacement's two directions cross (each is the larger on some windows).
PAIRS = {
    (0, 1): {
        "repl_ij": [0.30, 0.10, 0.50, 0.20, 0.90, 0.40],
        "repl_ji": [0.60, 0.05, 0.10, 0.45, 0.20, 0.50],
        "inter": [0.10, 0.02, 0.20, 0.05, 0.30, 0.15],
    },
    (1, 2): {
        "repl_ij": [0.05, 0.08, 0.02, 0.06, 0.04, 0.03],
        "repl_ji": [0.07, 0.01, 0.09, 0.02, 0.05, 0.06],
        "inter": [0.04, 0.05, 0.01, 0.03, 0.02, 0.05],
    },
    # replacement never moves the output: I/R undefined, inter / 0 on every resample
    (2, 3): {"repl_ij": [0.0] * 6, "repl_ji": [0.0] * 6, "inter": [0.01, 0.02, 0.03] * 2},
    (0, 2): {
        "repl_ij": [0.20, 0.25, 0.15, 0.30, 0.10, 0.20],
        "repl_ji": [0.10, 0.10, 0.20, 0.20, 0.30, 0.30],
        "inter": [0.30, 0.20, 0.40, 0.30, 0.20, 0.40],
    },
    # the only gap-3 pair: both protocols exactly 0 (0 / 0, inter == repl)
    (0, 3): {"repl_ij": [0.0] * 6, "repl_ji": [0.0] * 6, "inter": [0.0] * 6},
}
DELETION = {2: [0.8, 1.2, 0.4, 2.0, 0.6, 1.0], 0: [0.05, 0.02, 0.09, 0.01, 0.04, 0.07]}

# Eight windows, four adjacent pairs whose ranks move between resamples.
RANK_PAIRS = {
    (0, 1): {
        "repl_ij": [0.107, 0.103, 0.126, 0.131, 0.101, 0.128, 0.13, 0.109],
        "repl_ji": [0.121, 0.12, 0.102, 0.146, 0.087, 0.054, 0.1, 0.07],
        "inter": [0.118, 0.061, 0.13, 0.1, 0.091, 0.112, 0.08, 0.058],
    },
    (1, 2): {
        "repl_ij": [0.109, 0.141, 0.135, 0.161, 0.147, 0.123, 0.176, 0.116],
        "repl_ji": [0.075, 0.179, 0.103, 0.143, 0.085, 0.062, 0.177, 0.147],
        "inter": [0.088, 0.082, 0.11, 0.122, 0.089, 0.155, 0.104, 0.134],
    },
    (2, 3): {
        "repl_ij": [0.184, 0.191, 0.158, 0.077, 0.078, 0.087, 0.168, 0.076],
        "repl_ji": [0.169, 0.185, 0.115, 0.131, 0.122, 0.192, 0.114, 0.118],
        "inter": [0.167, 0.178, 0.092, 0.113, 0.186, 0.169, 0.142, 0.198],
    },
    (3, 4): {
        "repl_ij": [0.192, 0.147, 0.139, 0.105, 0.097, 0.1, 0.204, 0.108],
        "repl_ji": [0.2, 0.178, 0.165, 0.103, 0.141, 0.224, 0.095, 0.21],
        "inter": [0.12, 0.152, 0.158, 0.107, 0.113, 0.181, 0.08, 0.144],
    },
}


def _result(pairs, deletion=None, **meta) -> ScoreResult:
    res = ScoreResult(meta=meta, n_boot=N_BOOT, seed=SEED)
    for k, v in pairs.items():
        res.pairs[k] = {key: np.array(x, dtype=float) for key, x in v.items()}
    for k, v in (deletion or {}).items():
        res.deletion[k] = np.array(v, dtype=float)
    return res


def scores() -> ScoreResult:
    return _result(PAIRS, DELETION, num_layers=4, positions="all", model="toy")


def ranked() -> ScoreResult:
    return _result(RANK_PAIRS, num_layers=5, positions="last")


def boot(x, idx) -> np.ndarray:
    """Mean of each resample (no window is missing in these fixtures)."""
    return np.asarray(x, dtype=float)[idx].mean(axis=1)


def ci(samples) -> list[float]:
    return [float(np.percentile(samples, 2.5)), float(np.percentile(samples, 97.5))]


def point(pair) -> tuple[float, float, float]:
    """``(d_repl, d_inter, I/R or None)`` of a fixture pair."""
    d_r = max(np.mean(pair["repl_ij"]), np.mean(pair["repl_ji"]))
    d_i = np.mean(pair["inter"])
    return float(d_r), float(d_i), (float(d_i / d_r) if d_r > 0 else None)


class TestIntervals:
    def test_pair_rows_pin_every_interval(self):
        d = scores().to_dict()
        idx = resample_indices(6, N_BOOT, SEED)
        rows = {(r["i"], r["j"]): r for r in d["pairs"]}
        for key, v in PAIRS.items():
            r = rows[key]
            ba, bb = boot(v["repl_ij"], idx), boot(v["repl_ji"], idx)
            bi = boot(v["inter"], idx)
            rep = r["replacement"]
            assert rep["directed"] == pytest.approx([np.mean(v["repl_ij"]), np.mean(v["repl_ji"])])
            assert rep["ci"] == pytest.approx(ci(np.maximum(ba, bb)), abs=1e-12)
            assert rep["directed_ci"][0] == pytest.approx(ci(ba), abs=1e-12)
            assert rep["directed_ci"][1] == pytest.approx(ci(bb), abs=1e-12)
            assert r["interchange"]["ci"] == pytest.approx(ci(bi), abs=1e-12)
            if key in ((2, 3), (0, 3)):
                continue  # I/R of d_repl = 0: see test_zero_replacement
            assert r["ir_ratio"]["ci"] == pytest.approx(ci(bi / np.maximum(ba, bb)), abs=1e-12)

    def test_intervals_are_not_degenerate(self):
        """The fixture discriminates: max(ij, ji) differs from either direction alone."""
        r = {(x["i"], x["j"]): x for x in scores().to_dict()["pairs"]}[(0, 1)]
        lo, hi = r["replacement"]["ci"]
        (alo, ahi), (blo, bhi) = r["replacement"]["directed_ci"]
        assert lo < hi and (lo, hi) != (alo, ahi) and (lo, hi) != (blo, bhi)
        assert lo >= max(alo, blo) and hi >= max(ahi, bhi)
        # I/R of (1, 2) against the ji direction alone would be another interval
        idx = resample_indices(6, N_BOOT, SEED)
        v = PAIRS[(1, 2)]
        wrong = ci(boot(v["inter"], idx) / boot(v["repl_ji"], idx))
        right = {(x["i"], x["j"]): x for x in scores().to_dict()["pairs"]}[(1, 2)]
        assert right["ir_ratio"]["ci"] != pytest.approx(wrong, abs=1e-6)

    def test_deletion_rows(self):
        d = scores().to_dict()
        idx = resample_indices(6, N_BOOT, SEED)
        assert [x["layer"] for x in d["deletion"]] == [0, 2]
        for row in d["deletion"]:
            v = DELETION[row["layer"]]
            assert row["distance"] == pytest.approx(np.mean(v))
            assert row["ci"] == pytest.approx(ci(boot(v, idx)), abs=1e-12)
            assert row["per_window"] == pytest.approx(v)
        assert d["deletion"][1]["ci"][0] < d["deletion"][1]["ci"][1]

    def test_interval_depends_on_seed(self):
        a = scores().to_dict()["deletion"][1]["ci"]
        other = scores()
        other.seed = 0
        assert other.to_dict()["deletion"][1]["ci"] != pytest.approx(a, abs=1e-6)


class TestRows:
    def test_header(self):
        d = scores().to_dict()
        assert d["schema"] == "swapprune.scores/1"
        assert d["kl"] == "KL(p_base || p_modified), nats"
        assert d["model"] == "toy" and d["num_layers"] == 4 and d["positions"] == "all"
        assert d["bootstrap"] == {
            "resamples": N_BOOT,
            "seed": SEED,
            "unit": "window",
            "interval": "95% percentile",
        }

    def test_layer_types_default_to_full_attention(self):
        d = scores().to_dict()
        for r in d["pairs"]:
            assert r["types"] == ["full_attention", "full_attention"]
            assert r["crosses_types"] is False
            assert r["gap"] == r["j"] - r["i"]

    def test_point_values(self):
        rows = {(r["i"], r["j"]): r for r in scores().to_dict()["pairs"]}
        for key, v in PAIRS.items():
            r = rows[key]
            d_r, d_i, ir = point(v)
            assert r["replacement"]["distance"] == pytest.approx(d_r)
            assert r["replacement"]["mean"] == pytest.approx(
                (np.mean(v["repl_ij"]) + np.mean(v["repl_ji"])) / 2
            )
            assert r["interchange"]["distance"] == pytest.approx(d_i)
            assert r["gap_diff"] == pytest.approx(d_r - d_i)
            if ir is None:
                assert r["ir_ratio"]["value"] is None
            else:
                assert r["ir_ratio"]["value"] == pytest.approx(ir)

    def test_zero_replacement_divides_silently(self):
        """inter / 0 and 0 / 0 over the resamples raise no numpy division warning."""
        res = scores()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            d = res.to_dict()
        division = [str(w.message) for w in caught if "encountered in divide" in str(w.message)]
        assert division == []
        rows = {(r["i"], r["j"]): r for r in d["pairs"]}
        assert rows[(2, 3)]["ir_ratio"]["value"] is None
        assert all(math.isnan(x) for x in rows[(2, 3)]["ir_ratio"]["ci"])  # inf - inf
        assert rows[(0, 3)]["ir_ratio"]["value"] is None

    def test_windows_not_measured(self):
        """nan windows are skipped by every mean and written as null."""
        res = ScoreResult(meta={"num_layers": 3}, n_boot=50, seed=SEED)
        res.pairs[(0, 1)] = {
            "repl_ij": np.array([0.2, 0.4, 0.6]),
            "repl_ji": np.array([0.1, np.nan, 0.3]),
            "inter": np.array([np.nan, np.nan, np.nan]),  # never measured
        }
        res.pairs[(1, 2)] = {
            "repl_ij": np.array([0.5, 0.5, 0.5]),
            "repl_ji": np.array([0.25, 0.25, 0.25]),
            "inter": np.array([0.2, np.nan, 0.4]),
        }
        d = res.to_dict()
        r01, r12 = d["pairs"]
        assert res.directed(1, 0) == pytest.approx((0.2, 0.4))
        assert r01["replacement"]["per_window"] == [
            pytest.approx([0.2, 0.4, 0.6]),
            [0.1, None, 0.3],
        ]
        assert r01["replacement"]["directed"] == pytest.approx([0.4, 0.2])
        assert r01["interchange"]["per_window"] == [None, None, None]
        assert math.isnan(r01["interchange"]["distance"])
        assert r01["ir_ratio"]["value"] is None  # nan / 0.4 is not a ratio
        assert r12["interchange"]["per_window"] == [0.2, None, 0.4]
        assert r12["interchange"]["distance"] == pytest.approx(0.3)
        assert r12["ir_ratio"]["value"] == pytest.approx(0.6)
        again = ScoreResult.from_dict(json.loads(json.dumps(d)))
        np.testing.assert_array_equal(again.pairs[(0, 1)]["repl_ji"], [0.1, np.nan, 0.3])
        np.testing.assert_array_equal(again.pairs[(0, 1)]["inter"], [np.nan] * 3)

    def test_integer_windows_are_written_as_floats(self):
        res = ScoreResult(
            meta={"num_layers": 2},
            pairs={(0, 1): {"inter": np.array([1, 2, 3])}},
            deletion={1: np.array([0, 4, 8])},
        )
        d = res.to_dict()
        assert json.dumps(d["pairs"][0]["interchange"]["per_window"]) == "[1.0, 2.0, 3.0]"
        assert json.dumps(d["deletion"][0]["per_window"]) == "[0.0, 4.0, 8.0]"


class TestSummary:
    def test_by_gap(self):
        s = scores().to_dict()["summary"]
        assert [g["gap"] for g in s["by_gap"]] == [1, 2, 3]
        for g in s["by_gap"]:
            keys = [k for k in PAIRS if k[1] - k[0] == g["gap"]]
            pts = [point(PAIRS[k]) for k in keys]
            irs = [p[2] for p in pts if p[2] is not None]
            assert g["pairs"] == len(keys)
            assert g["median_replacement"] == pytest.approx(np.median([p[0] for p in pts]))
            assert g["median_interchange"] == pytest.approx(np.median([p[1] for p in pts]))
            assert g["mean_gap_diff"] == pytest.approx(np.mean([p[0] - p[1] for p in pts]))
            if irs:
                assert g["median_ir"] == pytest.approx(np.median(irs))
        g1, g2, g3 = s["by_gap"]
        assert g1["pairs"] == 3 and g1["fraction_inter_le_repl"] == pytest.approx(2 / 3)
        assert g2["fraction_inter_le_repl"] == 0.0
        # gap 3: d_inter == d_repl == 0 counts as inter <= repl; no I/R to take a median of
        assert g3["fraction_inter_le_repl"] == 1.0
        assert g3["median_ir"] is None

    def test_regime_uses_the_same_resamples_and_positions(self):
        res = scores()
        s = res.to_dict()["summary"]
        idx = resample_indices(6, N_BOOT, SEED)
        r = s["regime"]
        assert r == regime(res.pairs, idx, "all")
        assert r["positions"] == "all" and r["note"].endswith("; these scores use positions=all")
        assert r["pairs_used"] == 3  # the adjacent pairs
        assert isinstance(r["confidence"], float) and 0 < r["confidence"] <= 1
        assert r["confidence"] != regime(res.pairs, resample_indices(6, N_BOOT, 0))["confidence"]

    def test_regime_of_both_high(self):
        res = _result({(0, 1): {"repl_ij": [1.0, 2.0], "repl_ji": [1.0, 1.0], "inter": [0.5, 0.7]}})
        res.meta.update(num_layers=2, positions="last")
        r = res.to_dict()["summary"]["regime"]
        assert r["call"] == "both-high" and r["confidence"] == 1.0
        assert r["median_interchange"] == pytest.approx(0.6)
        assert r["positions"] == "last"

    def test_deletion_only_has_no_ranking(self):
        res = ScoreResult(meta={"num_layers": 3}, deletion={1: np.array([0.1, 0.2, 0.3])})
        d = res.to_dict()
        assert d["summary"] == {} and d["pairs"] == []
        assert d["deletion"][0]["distance"] == pytest.approx(0.2)

    def test_no_windows_yet_is_not_bootstrapped(self):
        res = ScoreResult(
            meta={"num_layers": 2},
            pairs={
                (0, 1): {"repl_ij": np.array([]), "repl_ji": np.array([]), "inter": np.array([])}
            },
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            d = res.to_dict()
        assert res.num_windows() == 0
        assert "ranking" not in d["summary"]
        assert d["summary"]["regime"]["confidence"] is None


class TestRanking:
    @staticmethod
    def expected(proto):
        """Rank table recomputed from the resample indices (1 = smallest distance)."""
        idx = resample_indices(8, N_BOOT, SEED)
        keys = sorted(RANK_PAIRS)
        if proto == "replacement":
            cols = [
                np.maximum(boot(RANK_PAIRS[k]["repl_ij"], idx), boot(RANK_PAIRS[k]["repl_ji"], idx))
                for k in keys
            ]
            pts = [point(RANK_PAIRS[k])[0] for k in keys]
        else:
            cols = [boot(RANK_PAIRS[k]["inter"], idx) for k in keys]
            pts = [point(RANK_PAIRS[k])[1] for k in keys]
        ranks = np.argsort(np.argsort(np.stack(cols, axis=1), axis=1), axis=1) + 1
        out = []
        for n, p in enumerate(np.argsort(pts)):
            col = ranks[:, p]
            lo, hi = np.percentile(col, 2.5), np.percentile(col, 97.5)
            out.append((keys[p], n + 1, pts[p], [int(lo), int(hi)]))
        return out

    @pytest.mark.parametrize("proto", ["replacement", "interchange"])
    def test_rank_table(self, proto):
        got = ranked().to_dict()["summary"]["ranking"][proto]
        want = self.expected(proto)
        assert [((x["i"], x["j"]), x["rank"]) for x in got] == [(w[0], w[1]) for w in want]
        assert [x["distance"] for x in got] == pytest.approx([w[2] for w in want])
        assert [x["rank_ci"] for x in got] == [w[3] for w in want]

    def test_rank_intervals_pinned(self):
        """The numbers the recomputation gives, written out: ranks do move between resamples."""
        rank = ranked().to_dict()["summary"]["ranking"]
        rep = {(x["i"], x["j"]): (x["rank"], x["rank_ci"]) for x in rank["replacement"]}
        inter = {(x["i"], x["j"]): (x["rank"], x["rank_ci"]) for x in rank["interchange"]}
        assert rep == {
            (0, 1): (1, [1, 1]),
            (1, 2): (2, [2, 4]),
            (2, 3): (3, [2, 3]),
            (3, 4): (4, [2, 4]),
        }
        assert inter == {
            (0, 1): (1, [1, 2]),
            (1, 2): (2, [1, 2]),
            (2, 3): (4, [3, 4]),
            (3, 4): (3, [3, 4]),
        }


class TestRoundTrip:
    def test_field_by_field(self, tmp_path):
        res = scores()
        res.save(tmp_path / "s.json")
        raw = json.loads((tmp_path / "s.json").read_text())
        again = ScoreResult.load(tmp_path / "s.json")
        assert again.meta == {"num_layers": 4, "positions": "all", "model": "toy"}
        assert (again.n_boot, again.seed) == (N_BOOT, SEED)
        assert sorted(again.pairs) == sorted(PAIRS)
        for k, v in PAIRS.items():
            assert set(again.pairs[k]) == {"repl_ij", "repl_ji", "inter"}
            for key, x in v.items():
                np.testing.assert_array_equal(again.pairs[k][key], x)
                assert again.pairs[k][key].dtype == np.float64
        assert sorted(again.deletion) == [0, 2]
        np.testing.assert_array_equal(again.deletion[2], DELETION[2])
        assert json.dumps(again.to_dict()) == json.dumps(raw)  # NaN != NaN under ==

    def test_one_protocol_and_no_deletion_key(self):
        data = {
            "schema": "swapprune.scores/1",
            "num_layers": 3,
            "bootstrap": {"resamples": 10, "seed": 3},
            "pairs": [{"i": 1, "j": 2, "interchange": {"per_window": [1, None, 3]}}],
        }
        res = ScoreResult.from_dict(data)
        assert res.meta == {"num_layers": 3} and (res.n_boot, res.seed) == (10, 3)
        assert set(res.pairs[(1, 2)]) == {"inter"} and res.deletion == {}
        inter = res.pairs[(1, 2)]["inter"]
        assert inter.dtype == np.float64
        np.testing.assert_array_equal(inter, [1.0, np.nan, 3.0])
        assert res.distance("interchange", 2, 1) == pytest.approx(2.0)
        assert res.protocols() == ["interchange"]

    def test_integer_windows_load_as_floats(self):
        data = {
            "schema": "swapprune.scores/1",
            "num_layers": 2,
            "bootstrap": {"resamples": 10, "seed": 0},
            "pairs": [],
            "deletion": [{"layer": 1, "per_window": [0, 2, 4]}],
        }
        res = ScoreResult.from_dict(data)
        assert res.deletion[1].dtype == np.float64
        res.deletion[1][0] = np.nan  # a float array can mark a window as not measured
        assert res.to_dict()["deletion"][0]["distance"] == pytest.approx(3.0)

    def test_wrong_schema_is_named(self):
        with pytest.raises(SwappruneError, match=r"\(schema 'other/2'\)$"):
            ScoreResult.from_dict({"schema": "other/2"})
        with pytest.raises(SwappruneError, match=r"\(schema None\)$"):
            ScoreResult.from_dict({"pairs": []})


class TestErrors:
    def test_protocol_not_scored_messages(self):
        inter_only = ScoreResult(meta={"num_layers": 2}, pairs={(0, 1): {"inter": np.ones(2)}})
        with pytest.raises(SwappruneError, match=r"^replacement was not scored$"):
            inter_only.distance("replacement", 1, 0)
        repl_only = ScoreResult(
            meta={"num_layers": 2},
            pairs={(0, 1): {"repl_ij": np.ones(2), "repl_ji": np.ones(2)}},
        )
        with pytest.raises(SwappruneError, match=r"^interchange was not scored$"):
            repl_only.distance("interchange", 0, 1)


def test_the_schema_name_loads_and_others_are_refused():
    data = {
        "schema": "swapprune.scores/1",
        "num_layers": 2,
        "bootstrap": {"resamples": 10, "seed": 0},
        "pairs": [{"i": 0, "j": 1, "interchange": {"per_window": [0.5, 1.5]}}],
    }
    assert ScoreResult.from_dict(data).distance("interchange", 0, 1) == pytest.approx(1.0)
    with pytest.raises(SwappruneError, match=r"^not a swapprune scores file \(schema 'x/1'\)$"):
        ScoreResult.from_dict({**data, "schema": "x/1"})
    with pytest.raises(SwappruneError, match="engine.scores/1"):  # no file ever carried it
        ScoreResult.from_dict({**data, "schema": "swapprune.engine.scores/1"})


def test_committed_study_scores_still_load():
    """eval/study's probe files, written by earlier versions, keep loading."""
    path = Path(__file__).resolve().parents[1] / "eval" / "study" / "scores_trained_last.json"
    assert json.loads(path.read_text())["schema"] == "swapprune.scores/1"
    res = ScoreResult.load(path)
    assert res.num_layers == 30 and (0, 1) in res.pairs and (26, 29) in res.pairs


def _doc(**changes) -> dict:
    """A valid 3-block scores document, with ``changes`` applied (key -> value)."""
    data = {
        "schema": "swapprune.scores/1",
        "num_layers": 3,
        "bootstrap": {"resamples": 10, "seed": 0},
        "pairs": [
            {"i": 0, "j": 1, "replacement": {"per_window": [[0.1, None], [0.2, 0.3]]},
             "interchange": {"per_window": [0.5, 1.5]}},
        ],
        "deletion": [{"layer": 2, "per_window": [1, 2]}],
    }  # fmt: skip
    data.update(changes)
    return data


def _pair(**row) -> list[dict]:
    return [{"i": 0, "j": 1, "interchange": {"per_window": [0.5, 1.5]}, **row}]


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"num_layers": 0}, "num_layers 0 is out of range"),
        ({"num_layers": True}, "num_layers must be an integer, got True"),
        ({"num_layers": "3"}, "num_layers must be an integer, got '3'"),
        ({"bootstrap": {"resamples": 0, "seed": 0}}, "bootstrap resamples 0 is out of range"),
        ({"bootstrap": {"resamples": 10, "seed": -1}}, "bootstrap seed -1 is out of range"),
        ({"bootstrap": {"resamples": 10}}, "missing 'seed'"),
        ({"pairs": _pair(j=3)}, "pair j 3 is out of range"),
        ({"pairs": _pair(i=-1)}, "pair i -1 is out of range"),
        ({"pairs": _pair(i=1, j=1)}, "pair 1-1 is not i < j"),
        ({"pairs": _pair(interchange={"per_window": "0.5"})},
         "per-window values must be a list, got str"),
        ({"pairs": _pair(interchange={"per_window": [0.5, True]})},
         "per-window value True is not a number"),
        ({"pairs": _pair(interchange={"per_window": [0.5, "x"]})},
         "per-window value 'x' is not a number"),
        ({"deletion": [{"layer": 3, "per_window": [1, 2]}]}, "deletion layer 3 is out of range"),
        ({"deletion": [{"layer": 2, "per_window": [1, 2, 3]}]},
         r"per-window values of different lengths \[2, 3\]"),
        ({"deletion": [{"layer": 1, "per_window": [1]}, {"layer": 2, "per_window": [1, 2, 3]}]},
         r"per-window values of different lengths \[1, 2, 3\]"),
    ],
)  # fmt: skip
def test_malformed_scores_files_say_what_is_wrong(changes, message):
    with pytest.raises(SwappruneError, match=rf"^malformed scores file: {message}$"):
        ScoreResult.from_dict(_doc(**changes))


def test_the_edges_of_a_valid_scores_file_load():
    res = ScoreResult.from_dict(_doc(num_layers=3))  # the last block is a valid layer index
    assert res.deletion[2].tolist() == [1.0, 2.0] and np.isnan(res.pairs[(0, 1)]["repl_ij"][1])
    one = ScoreResult.from_dict(_doc(num_layers=1, pairs=[], deletion=[]))  # one block
    assert one.n_boot == 10 and not one.pairs
    res = ScoreResult.from_dict(_doc(bootstrap={"resamples": 1, "seed": 0}))
    assert res.n_boot == 1
