"""What a scoring run will cost, said before it starts.

:func:`block_evaluations` counts exactly the decoder-block calls the probe
engine makes (one base pass per batch, then every plan's blocks that differ
from the base, shared prefixes counted once, as the runner walks them);
:func:`estimate_scoring` turns that into seconds with a block time measured on
this machine, on one batch of the run's own windows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from swapprune.engine.orders import PAIR_PROTOCOLS, deletion_plan, pair_probe_plans


def trie_blocks(plans: Iterable[Sequence[int]], num_layers: int) -> int:
    """Block calls needed to run ``plans`` from cached base states, sharing prefixes."""
    nodes: set[tuple[int, ...]] = set()
    for plan in plans:
        on_base = True
        for depth, block in enumerate(plan):
            if on_base and depth < num_layers and block == depth:
                continue  # the cached base state is reused
            on_base = False
            nodes.add(tuple(plan[: depth + 1]))
    return len(nodes)


def block_evaluations(
    num_layers: int,
    pairs: Sequence[tuple[int, int]],
    probes: Sequence[str],
    windows: int,
    batch_size: int,
) -> int:
    """Decoder-block calls of a scoring run (per batch: the base pass, then every unit)."""
    pair_protocols = tuple(p for p in probes if p in PAIR_PROTOCOLS)
    per_batch = num_layers
    if pair_protocols:
        for i, j in pairs:
            per_batch += trie_blocks(
                pair_probe_plans(num_layers, i, j, pair_protocols).values(), num_layers
            )
    if "deletion" in probes:
        per_batch += sum(
            trie_blocks([deletion_plan(num_layers, i)], num_layers) for i in range(num_layers)
        )
    return per_batch * math.ceil(windows / batch_size)


@dataclass(frozen=True)
class Estimate:
    block_evals: int
    block_seconds: float

    @property
    def seconds(self) -> float:
        return self.block_evals * self.block_seconds

    def describe(self) -> str:
        if math.isnan(self.block_seconds):
            return f"{self.block_evals} block evaluations"
        return (
            f"about {self.block_evals} block evaluations, ~{_duration(self.seconds)} at "
            f"{1000 * self.block_seconds:.0f} ms per block on this machine"
        )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def estimate_scoring(model, input_ids, pairs, probes, batch_size: int) -> Estimate:
    """Count the block calls; for longer runs, time one base pass on the first batch.

    The timed pass keeps logits for the last position only, after a warm-up call.
    A run of a few base passes' worth is not timed (the timing would cost as much).
    """
    import torch

    from swapprune.model.stack import decoder_stack

    L = decoder_stack(model).num_layers
    evals = block_evaluations(L, pairs, probes, input_ids.shape[0], batch_size)
    if evals <= 4 * L:
        return Estimate(evals, float("nan"))
    batch = input_ids[:batch_size].to(next(model.parameters()).device)
    with torch.no_grad():
        model(input_ids=batch[:1, :8], use_cache=False)  # warm-up: first-call allocations
        start = time.perf_counter()
        model(input_ids=batch, use_cache=False, logits_to_keep=1)
        elapsed = time.perf_counter() - start
    return Estimate(evals, elapsed / L)
