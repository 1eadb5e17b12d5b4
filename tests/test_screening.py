"""Ranking-only evaluations in bfloat16: where they apply, and that reported numbers stay float32."""

import contextlib

import numpy as np
import pytest
import torch
from tiny_models import tiny_ids, tiny_model

from swapprune.engine import screening
from swapprune.select import reference

IDS = tiny_ids(4, 24, seed=5)


def test_a_float32_model_on_a_fast_cpu_ranks_under_bf16_autocast(monkeypatch):
    model = tiny_model("llama")
    monkeypatch.setattr(screening, "fast_bf16", lambda device: True)
    ctx = screening.ranking_precision(model)
    assert isinstance(ctx, torch.autocast) and ctx.fast_dtype == torch.bfloat16
    assert screening.ranking_dtype(model) == "bfloat16 autocast"
    with ctx:
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
        out = torch.nn.functional.linear(torch.ones(2, 3), torch.ones(4, 3))
    assert out.dtype == torch.bfloat16


@pytest.mark.parametrize("why", ["slow bf16", "a bf16 model", "not a module"])
def test_elsewhere_the_evaluation_stays_as_loaded(why, monkeypatch):
    model = tiny_model("llama")
    if why == "slow bf16":
        monkeypatch.setattr(screening, "fast_bf16", lambda device: False)
    elif why == "a bf16 model":
        model = model.to(torch.bfloat16)
    else:
        model = None
    assert isinstance(screening.ranking_precision(model), contextlib.nullcontext)
    assert screening.ranking_dtype(model) == "as loaded"


def test_the_screen_ranks_in_bf16_and_the_carried_sets_are_measured_in_float32(monkeypatch):
    """The neighbour screen's numbers differ from float32 (bf16 products) but stay close;
    the certificate's own windows are evaluated outside the autocast: float32 exactly."""
    monkeypatch.setattr(screening, "fast_bf16", lambda device: True)
    model = tiny_model("llama")
    held = reference.Heldout(certify=type("W", (), {"input_ids": IDS})())
    sets = [(1, 3), (2, 3), (1, 4)]
    bf = held.screen(model, sets, batch_size=2)
    from swapprune.engine.oracle import CalibrationOracle

    exact = CalibrationOracle(model, IDS[: reference.SCREEN_WINDOWS], 2, "ppl")
    fp = reference.window_nlls(exact, sets)
    assert all(not np.array_equal(a, b) for a, b in zip(bf, fp))  # bf16 ran
    assert all(np.allclose(a, b, rtol=0.05) for a, b in zip(bf, fp))
    full = CalibrationOracle(model, IDS, 2, "ppl")
    certify = held.oracle(model, "certify", 2)
    assert np.array_equal(reference.window_nll(certify, (1, 3)), reference.window_nll(full, (1, 3)))
