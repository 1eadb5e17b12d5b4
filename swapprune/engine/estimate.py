"""What a run will compute, counted before it starts, and how long that takes here.

Counts (pure, no torch):

* :func:`block_evaluations` / :func:`probe_work`: exactly the decoder-block calls
  the probe engine makes (one base pass per batch, then every plan's blocks that
  differ from the base, shared prefixes counted once, as the runner walks them),
  with the block-tokens and LM-head rows that go with them;
* :func:`pass_work`: plain forward passes (a base capture, a perplexity window);
* :func:`set_work`: evaluations of pruned models on cached windows (the oracle's
  queries, the certificate's plausible sets), bounded by the kept blocks.

:func:`measure_rates` times one base pass on one batch of the run's own windows
(after a warm-up call) and the LM head on its rows, so that
:meth:`Rates.seconds` turns any :class:`Work` into seconds on this machine, at the
thread count the run uses.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from swapprune.engine.orders import PAIR_PROBES, deletion_plan, pair_probe_plans

# measure_rates times the model: it imports torch and the modules that run it; the
# counts import neither.


@dataclass(frozen=True)
class Work:
    """Compute of one part of a run.

    Attributes:
        block_evals: decoder-block calls (one block on one batch).
        block_tokens: one block over one token, summed (comparable across window sizes).
        head_rows: positions the final norm and LM head run on (with the KL or the NLL).
    """

    block_evals: int = 0
    block_tokens: int = 0
    head_rows: int = 0

    def __add__(self, other: Work) -> Work:
        return Work(
            self.block_evals + other.block_evals,
            self.block_tokens + other.block_tokens,
            self.head_rows + other.head_rows,
        )

    def __sub__(self, other: Work) -> Work:
        return Work(
            self.block_evals - other.block_evals,
            self.block_tokens - other.block_tokens,
            self.head_rows - other.head_rows,
        )

    def times(self, k: int) -> Work:
        return Work(k * self.block_evals, k * self.block_tokens, k * self.head_rows)


def _batches(windows: int, batch_size: int) -> list[int]:
    """Sizes of the batches ``windows`` windows are run in."""
    full, rest = divmod(windows, batch_size)
    return [batch_size] * full + ([rest] if rest else [])


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


def _unit_plans(num_layers: int, pairs, probes) -> list[list[tuple[int, ...]]]:
    """The plans of every unit a scoring run probes (pairs, then deletions)."""
    pair_protocols = tuple(p for p in probes if p in PAIR_PROBES)
    units = []
    if pair_protocols:
        for i, j in pairs:
            units.append(list(pair_probe_plans(num_layers, i, j, pair_protocols).values()))
    if "deletion" in probes:
        units += [[deletion_plan(num_layers, i)] for i in range(num_layers)]
    return units


def block_evaluations(
    num_layers: int,
    pairs: Sequence[tuple[int, int]],
    probes: Sequence[str],
    windows: int,
    batch_size: int,
) -> int:
    """Decoder-block calls of a scoring run (per batch: the base pass, then every unit)."""
    per_batch = num_layers + sum(
        trie_blocks(plans, num_layers) for plans in _unit_plans(num_layers, pairs, probes)
    )
    return per_batch * math.ceil(windows / batch_size)


def probe_work(
    num_layers: int,
    pairs: Sequence[tuple[int, int]],
    probes: Sequence[str],
    windows: int,
    tokens: int,
    batch_size: int,
    positions: str = "all",
) -> Work:
    """The compute of probing ``pairs`` (and deletions) on ``windows`` x ``tokens``."""
    units = _unit_plans(num_layers, pairs, probes)
    blocks = num_layers + sum(trie_blocks(plans, num_layers) for plans in units)
    heads = 1 + sum(len(plans) for plans in units)  # the base logits, then every plan's
    rows = tokens if positions == "all" else 1
    out = Work()
    for b in _batches(windows, batch_size) if units else []:
        out += Work(blocks, blocks * b * tokens, heads * b * rows)
    return out


def pass_work(blocks: int, windows: int, tokens: int, batch_size: int, head: bool = True) -> Work:
    """``blocks`` blocks over every window, with the head at every position or not at all."""
    out = Work()
    for b in _batches(windows, batch_size):
        out += Work(blocks, blocks * b * tokens, b * tokens if head else 0)
    return out


def set_work(
    num_layers: int, budget: int, sets: int, windows: int, tokens: int, batch_size: int
) -> Work:
    """At most: one capture of the windows, then ``sets`` pruned models of ``budget`` removed.

    A pruned model restarts from the cached state at its first removed block, so each
    set runs at most its ``num_layers - budget`` kept blocks (fewer when its first
    removal is deep), and its head on every position.
    """
    capture = pass_work(num_layers, windows, tokens, batch_size, head=False)
    each = pass_work(max(0, num_layers - budget), windows, tokens, batch_size)
    return capture + each.times(sets)


@dataclass(frozen=True)
class Rates:
    """Seconds per unit of :class:`Work` on this machine, as measured.

    Attributes:
        block_token_s: one decoder block over one token.
        head_row_s: the final norm, LM head and the KL (float64) over one position.
        shape: ``(windows, tokens)`` of the timed batch.
        threads: torch threads during the timing.
        ranking: the time of a ranking-only pass (bfloat16 products where they are fast,
            :func:`~swapprune.engine.screening.ranking_precision`) over the plain one's.
    """

    block_token_s: float
    head_row_s: float
    shape: tuple[int, int]
    threads: int
    ranking: float = 1.0

    def seconds(self, work: Work, ranking: bool = False) -> float:
        """Seconds of ``work``; ``ranking``: run as a ranking-only pass."""
        s = work.block_tokens * self.block_token_s + work.head_rows * self.head_row_s
        return s * (self.ranking if ranking else 1.0)

    def block_ms(self) -> float:
        """One block on the timed batch, in milliseconds."""
        return 1000 * self.block_token_s * self.shape[0] * self.shape[1]


def measure_rates(model, input_ids, batch_size: int) -> Rates:
    """Time one base pass (head at the last position only) and the head + KL on its rows.

    On the first batch of ``input_ids``, after a short warm-up call that pays the
    first-call allocations. Costs about one base pass and a head over the batch.
    """
    import torch  # imports torch

    from swapprune.engine.probes import kl_rows  # imports torch, numpy
    from swapprune.engine.screening import ranking_precision  # imports torch
    from swapprune.model.stack import decoder_stack  # imports torch

    stack = decoder_stack(model)
    L = stack.num_layers
    batch = input_ids[:batch_size].to(next(model.parameters()).device)
    b, t = batch.shape
    with torch.no_grad():
        model(input_ids=batch[:1, :8], use_cache=False)  # warm-up: first-call allocations
        start = time.perf_counter()
        out = model(input_ids=batch, use_cache=False, logits_to_keep=1, output_hidden_states=True)
        blocks_s = time.perf_counter() - start
        head = model.get_output_embeddings()
        hidden = out.hidden_states[-1].to(next(head.parameters()).device)
        start = time.perf_counter()
        logits = stack.head(hidden).reshape(b * t, -1)
        kl_rows(logits, logits)
        head_s = time.perf_counter() - start
        ranking = 1.0
        ctx = ranking_precision(model)
        if isinstance(ctx, torch.autocast):  # the screens run faster: time them too
            with ctx:
                model(input_ids=batch[:1, :8], use_cache=False)
                start = time.perf_counter()
                model(input_ids=batch, use_cache=False, logits_to_keep=1)
                ranking = min(1.0, (time.perf_counter() - start) / blocks_s)
    return Rates(blocks_s / (L * b * t), head_s / (b * t), (b, t), torch.get_num_threads(), ranking)


def duration(seconds: float) -> str:
    """``"40 s"``, ``"12 min"``, ``"3.1 h"``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
