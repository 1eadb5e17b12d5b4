"""Every probe pinned to its definition, written out by hand.

The expected plans are literal tuples (docs/method.md section 2), never built with
``swapprune.engine.orders``; the expected KL values come from a plain forward of
the model whose block list is rebuilt here from those literal plans. A probe
that is swapped for another (interchange computed as a replacement, a flipped
replacement direction, deletion skipping the wrong block) fails here.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tiny_models import tiny_ids, tiny_model

from swapprune.engine.orders import (
    deletion_plan,
    interchange_plan,
    pair_probe_plans,
    parse_pairs,
    parse_protocols,
    replacement_plan,
)
from swapprune.engine.probing import score
from swapprune.errors import SwappruneError

BOTH = ("replacement", "interchange")

# -- the plans, as literals ---------------------------------------------------

# (L, i, j): {key: plan}; key "repl_ij" is D(i<-j): slot i runs block j.
PAIR_PLANS = {
    (5, 1, 3): {"repl_ij": (0, 3, 2, 3, 4), "repl_ji": (0, 1, 2, 1, 4), "inter": (0, 3, 2, 1, 4)},
    (5, 1, 2): {"repl_ij": (0, 2, 2, 3, 4), "repl_ji": (0, 1, 1, 3, 4), "inter": (0, 2, 1, 3, 4)},
    (5, 0, 4): {"repl_ij": (4, 1, 2, 3, 4), "repl_ji": (0, 1, 2, 3, 0), "inter": (4, 1, 2, 3, 0)},
    (6, 2, 3): {
        "repl_ij": (0, 1, 3, 3, 4, 5),
        "repl_ji": (0, 1, 2, 2, 4, 5),
        "inter": (0, 1, 3, 2, 4, 5),
    },
    (6, 1, 4): {
        "repl_ij": (0, 4, 2, 3, 4, 5),
        "repl_ji": (0, 1, 2, 3, 1, 5),
        "inter": (0, 4, 2, 3, 1, 5),
    },
    (6, 0, 5): {
        "repl_ij": (5, 1, 2, 3, 4, 5),
        "repl_ji": (0, 1, 2, 3, 4, 0),
        "inter": (5, 1, 2, 3, 4, 0),
    },
}
DELETION_PLANS = {
    (5, 0): (1, 2, 3, 4),
    (5, 1): (0, 2, 3, 4),
    (5, 4): (0, 1, 2, 3),
    (6, 2): (0, 1, 3, 4, 5),
    (6, 4): (0, 1, 2, 3, 5),
}


@pytest.mark.parametrize("case", sorted(PAIR_PLANS))
def test_pair_plans_are_the_literal_tuples(case):
    L, i, j = case
    want = PAIR_PLANS[case]
    assert pair_probe_plans(L, i, j, BOTH) == want
    assert list(pair_probe_plans(L, i, j, BOTH)) == ["repl_ij", "repl_ji", "inter"]
    assert pair_probe_plans(L, i, j, ("replacement",)) == {
        k: want[k] for k in ("repl_ij", "repl_ji")
    }
    assert pair_probe_plans(L, i, j, ("interchange",)) == {"inter": want["inter"]}
    assert pair_probe_plans(L, i, j, ("deletion",)) == {}
    # slot <- block, and the interchange in either argument order
    assert replacement_plan(L, i, j) == want["repl_ij"]
    assert replacement_plan(L, j, i) == want["repl_ji"]
    assert interchange_plan(L, i, j) == interchange_plan(L, j, i) == want["inter"]


@pytest.mark.parametrize("case", sorted(DELETION_PLANS))
def test_deletion_plans_are_the_literal_tuples(case):
    assert deletion_plan(*case) == DELETION_PLANS[case]


def test_pair_sets_are_the_literal_lists():
    assert parse_pairs("adjacent", 4) == [(0, 1), (1, 2), (2, 3)]
    assert parse_pairs(" adjacent ", 2) == [(0, 1)]
    assert parse_pairs("all", 4) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert parse_pairs("gap:1", 4) == [(0, 1), (1, 2), (2, 3)]
    assert parse_pairs("gap:2", 4) == [(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)]
    assert parse_pairs("gap:9", 3) == [(0, 1), (0, 2), (1, 2)]
    assert parse_pairs("3-1, 0-2,1-3", 4) == [(0, 2), (1, 3)]
    assert parse_pairs("0-3", 4) == [(0, 3)]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("gap:0", "K must be >= 1"),
        ("gap:x", "integer K"),
        ("2-2", "same block twice"),
        ("0-4", r"out of range: the model has 4 blocks, indices 0\.\.3"),
        ("1-", "bad pair '1-'"),
        ("adjacent,0-1", "bad pair"),
        ("", "bad pair"),
    ],
)
def test_bad_pair_sets(spec, message):
    with pytest.raises(SwappruneError, match=message):
        parse_pairs(spec, 4)


def test_protocol_names():
    assert parse_protocols("interchange, replacement,interchange") == ("interchange", "replacement")
    assert parse_protocols(["deletion"]) == ("deletion",)
    with pytest.raises(SwappruneError) as err:
        parse_protocols(" , ")
    assert str(err.value) == "no protocol given; choose from replacement, interchange, deletion"
    with pytest.raises(SwappruneError, match="^unknown protocol 'swap'"):
        parse_protocols("replacement,swap")


# -- the probe engine against a naive forward of the literal plans ----------


@contextlib.contextmanager
def _blocks(model, plan):
    """Run ``model`` with its block list rebuilt as ``plan`` (its own modules, in that order)."""
    owner, attr = (model.model, "layers") if hasattr(model, "model") else (model.transformer, "h")
    original = getattr(owner, attr)
    count = "num_hidden_layers" if hasattr(model.config, "num_hidden_layers") else "n_layer"
    n = getattr(model.config, count)
    setattr(owner, attr, torch.nn.ModuleList([original[k] for k in plan]))
    setattr(model.config, count, len(plan))
    try:
        yield
    finally:
        setattr(owner, attr, original)
        setattr(model.config, count, n)


@torch.no_grad()
def _naive_kl(model, ids, plan, positions):
    base = model(input_ids=ids, use_cache=False).logits.double()
    with _blocks(model, plan):
        mod = model(input_ids=ids, use_cache=False).logits.double()
    logp, logq = F.log_softmax(base, -1), F.log_softmax(mod, -1)
    kl = (logp.exp() * (logp - logq)).sum(-1)  # [B, T]
    return (kl[:, -1] if positions == "last" else kl.mean(-1)).numpy()


@pytest.mark.parametrize("positions", ["last", "all"])
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_engine_equals_naive_forward_of_literal_plans(family, positions):
    model, ids = tiny_model(family), tiny_ids(4, 12)
    res = score(
        model,
        calibration=ids,
        pairs=[(2, 3), (1, 4), (0, 5)],
        positions=positions,
        protocols="replacement,interchange,deletion",
        batch_size=4,
        n_boot=20,
        progress=False,
    )
    for i, j in ((2, 3), (1, 4), (0, 5)):
        for key, plan in PAIR_PLANS[(6, i, j)].items():
            np.testing.assert_allclose(
                res.pairs[(i, j)][key],
                _naive_kl(model, ids, plan, positions),
                rtol=1e-4,
                atol=1e-8,
                err_msg=f"{family} {i}-{j} {key}",
            )
    for layer in (2, 4):
        np.testing.assert_allclose(
            res.deletion[layer],
            _naive_kl(model, ids, DELETION_PLANS[(6, layer)], positions),
            rtol=1e-4,
            atol=1e-8,
            err_msg=f"{family} -{layer}",
        )
    # the definitions differ on this model, so a swapped probe cannot pass by accident
    v = res.pairs[(1, 4)]
    assert len({float(v[k].mean()) for k in ("repl_ij", "repl_ji", "inter")}) == 3
    assert float(v["inter"].mean()) > 0
