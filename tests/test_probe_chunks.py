"""Window chunking under a cache budget gives the same values as one chunk.

When the cached hidden states ``(L + 1) x N x T x H x itemsize`` plus the base
log-probs ``N x P x V x 4`` exceed ``cache_bytes``, :class:`ProbeEngine`
processes the windows in chunks (whole batches each) and re-runs every unit
per chunk. Each batch sees exactly the same computation either way, so the
per-window values must be identical, and equal to the literal definitions.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_models import tiny_ids, tiny_model

from swapprune.engine import naive
from swapprune.engine.orders import deletion_plan, pair_probe_plans
from swapprune.engine.probes import ProbeEngine, Unit
from swapprune.engine.probing import score

PROBES = ("replacement", "interchange")
UNITS = [Unit(0, 1), Unit(1, 4), Unit(3, 4), Unit(2)]


@pytest.fixture(autouse=True)
def one_thread():
    """Bitwise comparisons need a fixed reduction order: MKL may change its thread
    count under CPU contention (MKL_DYNAMIC), which moves fp32 results by ~1e-7."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _run(engine: ProbeEngine) -> dict:
    got: dict = {}

    def done(unit, values):
        assert unit not in got, "a unit was reported twice"
        (mode,) = engine.modes
        got[unit] = values[mode]

    engine.run(UNITS, PROBES, done)
    return got


@pytest.mark.parametrize("positions", ["last", "all"])
@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma3_text"])
def test_chunked_equals_unchunked_and_naive(family, positions):
    model = tiny_model(family)
    ids = tiny_ids(n=5, t=12)
    whole = ProbeEngine(model, ids, positions, batch_size=2, cache_bytes=1e9)
    tiny = ProbeEngine(model, ids, positions, batch_size=2, cache_bytes=1.0)
    assert whole.chunks == [(0, 5)]
    assert tiny.chunks == [(0, 2), (2, 4), (4, 5)]  # never below one batch
    a, b = _run(whole), _run(tiny)
    assert set(a) == set(b) == set(UNITS)
    L = whole.L
    # the reference runs the same batches: fp32 matmuls depend on the batch shape
    batches = [ids[s : s + 2] for s in range(0, 5, 2)]
    bases = [naive.plan_logits(model, tuple(range(L)), x) for x in batches]
    for unit in UNITS:
        assert set(a[unit]) == set(b[unit])
        for key in a[unit]:
            assert not np.isnan(b[unit][key]).any()
            np.testing.assert_array_equal(a[unit][key], b[unit][key])
        plans = (
            {"delete": deletion_plan(L, unit.i)}
            if unit.j is None
            else pair_probe_plans(L, unit.i, unit.j, PROBES)
        )
        for key, plan in plans.items():
            ref = torch.cat(
                [
                    naive.kl_per_window(base, naive.plan_logits(model, plan, x), positions)
                    for base, x in zip(bases, batches)
                ]
            )
            np.testing.assert_allclose(
                b[unit][key], ref.double().numpy(), rtol=1e-5, atol=1e-7, err_msg=f"{unit} {key}"
            )


def test_chunk_size_follows_budget():
    model = tiny_model("llama")
    ids = tiny_ids(n=10, t=12)
    probe = ProbeEngine(model, ids, "all", batch_size=2, cache_bytes=1e9)
    L, H, V = probe.L, model.config.hidden_size, model.config.vocab_size
    assert probe.bytes_per_window == (L + 1) * 12 * H * 4 + 12 * V * 4
    budget = 4.5 * probe.bytes_per_window  # room for 4 windows -> chunks of 4 (2 batches)
    chunked = ProbeEngine(model, ids, "all", batch_size=2, cache_bytes=budget)
    assert chunked.chunks == [(0, 4), (4, 8), (8, 10)]
    last = ProbeEngine(model, ids, "last", batch_size=2, cache_bytes=1e9)
    assert last.bytes_per_window == (L + 1) * 12 * H * 4 + V * 4


def test_score_json_identical_with_tiny_cache():
    model = tiny_model("qwen2")
    ids = tiny_ids(n=6, t=10)
    kw = dict(
        calibration=ids,
        pairs="adjacent",
        protocols="replacement,interchange,deletion",
        batch_size=2,
        n_boot=50,
        progress=False,
    )
    one = score(model, cache_gb=4.0, **kw)
    many = score(model, cache_gb=1e-12, **kw)
    assert one.meta["timing"]["window_chunks"] == 1
    assert many.meta["timing"]["window_chunks"] == math.ceil(6 / 2)
    d1, d2 = one.to_dict(), many.to_dict()
    for d in (d1, d2):
        d.pop("timing")
    assert d1 == d2


def test_both_modes_chunked_equal_unchunked():
    model, ids = tiny_model("qwen3"), tiny_ids(n=5, t=12)
    got = []
    for budget in (1e9, 1.0):
        engine = ProbeEngine(model, ids, ("last", "all"), batch_size=2, cache_bytes=budget)
        out: dict = {}
        engine.run(UNITS, PROBES, lambda unit, values, out=out: out.__setitem__(unit, values))
        got.append(out)
    a, b = got
    for unit in UNITS:
        for mode in ("last", "all"):
            for key, v in a[unit][mode].items():
                np.testing.assert_array_equal(v, b[unit][mode][key])
