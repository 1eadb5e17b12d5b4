"""Merge rules: formulas, registry, refusals."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from swapprune.edit.merging import MERGES, MergeRule, get_merge
from swapprune.errors import SwappruneError


def _block(seed: int, dtype=torch.float32) -> nn.Module:
    torch.manual_seed(seed)
    block = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3)).to(dtype)
    with torch.no_grad():
        for p in block.parameters():
            p.add_(torch.randn_like(p))
    block.register_buffer("mask", torch.ones(2, dtype=torch.bool))
    return block


def _params(block):
    return {n: p.detach().clone() for n, p in block.named_parameters()}


def test_registry_names():
    assert {"average", "laco"} <= set(MERGES.names())
    assert all(issubclass(MERGES.get(n), MergeRule) for n in MERGES.names())


def test_unknown_rule_suggests_a_name():
    with pytest.raises(SwappruneError, match="did you mean 'laco'"):
        get_merge("lacoo")


def test_average_is_the_mean():
    a, b, c = _block(0), _block(1), _block(2)
    merged = get_merge("average").merge_blocks(a, [b, c])
    pa, pb, pc = _params(a), _params(b), _params(c)
    for name in pa:
        torch.testing.assert_close(merged[name], (pa[name] + pb[name] + pc[name]) / 3)


def test_weighted_average():
    a, b = _block(0), _block(1)
    merged = get_merge("average", weights=[3.0, 1.0]).merge_blocks(a, [b])
    pa, pb = _params(a), _params(b)
    for name in pa:
        torch.testing.assert_close(merged[name], 0.75 * pa[name] + 0.25 * pb[name])
    with pytest.raises(SwappruneError, match="2 weights for 3 blocks"):
        get_merge("average", weights=[1.0, 1.0]).merge_blocks(a, [b, _block(2)])


def test_laco_adds_differences():
    a, b, c = _block(0), _block(1), _block(2)
    merged = get_merge("laco").merge_blocks(a, [b, c])
    pa, pb, pc = _params(a), _params(b), _params(c)
    for name in pa:
        torch.testing.assert_close(
            merged[name], pa[name] + (pb[name] - pa[name]) + (pc[name] - pa[name])
        )


def test_merge_does_not_touch_the_blocks_and_keeps_dtype():
    a, b = _block(0, torch.bfloat16), _block(1, torch.bfloat16)
    before = _params(a)
    merged = get_merge("average").merge_blocks(a, [b])
    assert all(t.dtype == torch.bfloat16 for t in merged.values())
    assert all(torch.equal(before[n], p) for n, p in a.named_parameters())
    assert "mask" not in merged  # buffers are not merged


def test_refuses_different_classes():
    with pytest.raises(SwappruneError, match="one class only"):
        get_merge("average").merge_blocks(nn.Linear(4, 3), [nn.Bilinear(4, 4, 3)])


def test_refuses_different_shapes():
    with pytest.raises(SwappruneError, match="shape"):
        get_merge("laco").merge_blocks(nn.Linear(4, 3), [nn.Linear(4, 5)])
