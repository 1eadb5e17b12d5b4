"""The pre-run cost estimate counts exactly the block calls the engine makes."""

import pytest
import torch
from tiny_models import tiny_model

from swapprune.engine.estimate import block_evaluations, trie_blocks
from swapprune.engine.orders import parse_pairs
from swapprune.engine.probing import score


def test_trie_counts_shared_prefixes_once():
    # L=5, pair (1, 2): repl 1<-2 = (0,2,2,3,4), repl 2<-1 = (0,1,1,3,4), inter = (0,2,1,3,4).
    plans = [(0, 2, 2, 3, 4), (0, 1, 1, 3, 4), (0, 2, 1, 3, 4)]
    # (0,2) shared by repl 1<-2 and inter: 1; then (0,2,2),(0,2,2,3),(0,2,2,3,4): 3;
    # (0,2,1),(0,2,1,3),(0,2,1,3,4): 3; repl 2<-1 leaves the base at depth 2: 3.
    assert trie_blocks(plans, 5) == 10
    assert trie_blocks([(0, 1, 2, 3, 4)], 5) == 0  # the base plan costs nothing more
    assert trie_blocks([(0, 2, 3, 4)], 5) == 3  # deletion of block 1


@pytest.mark.parametrize(
    "pairs, probes",
    [
        ("adjacent", ("replacement", "interchange")),
        ("gap:2", ("interchange",)),
        ("adjacent", ("deletion",)),
    ],
)
def test_estimate_equals_the_engine_count(pairs, probes):
    model = tiny_model("llama")
    L = model.config.num_hidden_layers
    res = score(
        model,
        calibration=torch.randint(3, 90, (5, 12)),
        protocols=",".join(probes),
        pairs=pairs if "deletion" not in probes else [],
        batch_size=2,
        progress=False,
        positions="last",
    )
    pair_list = parse_pairs(pairs, L) if "deletion" not in probes else []
    assert block_evaluations(L, pair_list, probes, 5, 2) == res.meta["timing"]["block_evals"]
