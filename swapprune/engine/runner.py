"""Run layer plans over a model's own blocks, with prefix reuse.

A *layer plan* is the sequence of block indices run between the embedding and
the final norm; the unmodified model is ``range(L)``. :class:`PlanRunner` runs
one base forward per batch of windows with forward pre-hooks on every block,
and keeps

* the hidden state entering every slot (``h[k]``, ``k = 0..L``; ``h[L]`` is the
  state after the last block), and
* the exact positional/keyword arguments each block received besides its
  hidden state (attention masks, rotary embeddings, ...).

A block always reuses *its own* captured arguments wherever a plan runs it, so
a sliding-window block keeps its sliding mask and its RoPE base in a full
attention slot (the per-block ``layer_types`` convention). A plan whose first
slot that differs from the base plan is ``s`` starts from ``h[s]``; plans that
share a longer prefix share its computation (they are walked as a trie).

This module is the only one that registers hooks. It never mutates the model
and never copies weights.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from swapprune.model.stack import DecoderStack, decoder_stack

Plan = tuple[int, ...]


class _StopForward(Exception):
    """Raised from the last block's hook: nothing after the blocks is needed."""


@dataclass
class _BlockCall:
    args: tuple
    kwargs: dict


@dataclass
class BatchCache:
    """Everything cached for one batch of windows.

    Attributes:
        hidden: ``L + 1`` tensors ``[B, T, H]``; ``hidden[k]`` enters slot ``k``.
        calls: per block, the arguments it received besides its hidden state.
    """

    hidden: list[torch.Tensor]
    calls: list[_BlockCall]

    @property
    def batch_size(self) -> int:
        return self.hidden[0].shape[0]

    def nbytes(self) -> int:
        return sum(h.numel() * h.element_size() for h in self.hidden)


@dataclass
class RunStats:
    """Work counters: decoder-block calls, the tokens they ran over, LM-head rows.

    ``block_tokens`` counts one decoder block over one token, so runs with windows of
    different lengths compare.
    """

    block_evals: int = 0
    block_tokens: int = 0
    head_rows: int = 0
    per_block_rows: dict = field(default_factory=dict)


def _device_of(module: nn.Module) -> torch.device:
    """Where ``module`` computes: accelerate's execution device for offloaded modules
    (their parameters sit on ``meta`` until the hook loads them), else its parameters'."""
    hook = getattr(module, "_hf_hook", None)
    device = getattr(hook, "execution_device", None)
    if device is not None:
        return torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


class PlanRunner:
    """Evaluate layer plans of one model on fixed windows of token ids.

    Args:
        model: a loaded ``*ForCausalLM`` model (left unmodified).
        stack: its decoder stack; resolved from the model if omitted.
    """

    def __init__(self, model: Any, stack: DecoderStack | None = None):
        self.model = model
        self.stack = stack or decoder_stack(model)
        self.num_layers = self.stack.num_layers
        self.base_plan: Plan = tuple(range(self.num_layers))
        self.stats = RunStats()
        self._block_devices = [_device_of(b) for b in self.stack.blocks]
        self.head_device = _device_of(model.get_output_embeddings())

    # -- base pass ---------------------------------------------------------
    @torch.no_grad()
    def capture(self, input_ids: torch.Tensor) -> BatchCache:
        """Run the base model once on ``input_ids`` ``[B, T]`` and cache every slot."""
        blocks = self.stack.blocks
        L = len(blocks)
        hidden: list[torch.Tensor | None] = [None] * (L + 1)
        calls: list[_BlockCall | None] = [None] * L
        handles = []

        def pre_hook(idx):
            def hook(module, args, kwargs):
                if args:
                    h, rest = args[0], tuple(args[1:])
                    kw = dict(kwargs)
                else:
                    kw = dict(kwargs)
                    h, rest = kw.pop("hidden_states"), ()
                hidden[idx] = h.detach()
                calls[idx] = _BlockCall(rest, kw)

            return hook

        def last_hook(module, args, kwargs, output):
            out = output[0] if isinstance(output, tuple) else output
            hidden[L] = out.detach()
            raise _StopForward

        for idx, block in enumerate(blocks):
            handles.append(block.register_forward_pre_hook(pre_hook(idx), with_kwargs=True))
        handles.append(blocks[L - 1].register_forward_hook(last_hook, with_kwargs=True))
        device = self._input_device()
        try:
            self.model(input_ids=input_ids.to(device), use_cache=False)
        except _StopForward:
            pass
        finally:
            for h in handles:
                h.remove()
        if any(h is None for h in hidden):
            missing = [i for i, h in enumerate(hidden) if h is None]
            raise RuntimeError(f"blocks {missing} were not run by the model's forward")
        self.stats.block_evals += L
        self.stats.block_tokens += L * input_ids.shape[0] * input_ids.shape[1]
        return BatchCache(hidden=hidden, calls=calls)  # type: ignore[arg-type]

    def _input_device(self) -> torch.device:
        emb = self.model.get_input_embeddings()
        return _device_of(emb)

    # -- plan evaluation ---------------------------------------------------
    def run_block(self, block_idx: int, hidden: torch.Tensor, cache: BatchCache) -> torch.Tensor:
        """Run block ``block_idx`` on ``hidden`` ``[B, T, H]`` with its own arguments."""
        call = cache.calls[block_idx]
        hidden = hidden.to(self._block_devices[block_idx])
        out = self.stack.blocks[block_idx](hidden, *call.args, **call.kwargs)
        self.stats.block_evals += 1
        self.stats.block_tokens += hidden.shape[0] * hidden.shape[1]
        return out[0] if isinstance(out, tuple) else out

    @torch.no_grad()
    def run_plans(
        self, plans: Sequence[Sequence[int]], cache: BatchCache
    ) -> Iterator[tuple[int, torch.Tensor]]:
        """Yield ``(plan_index, final_hidden)`` for every plan, sharing prefixes.

        ``final_hidden`` is the ``[B, T, H]`` state after the plan's last slot,
        before the final norm. Plans are walked as a trie: a prefix equal to
        the base plan's is read from the cache, any other shared prefix is
        computed once.
        """
        plans = [tuple(p) for p in plans]
        for p in plans:
            bad = [b for b in p if not 0 <= b < self.num_layers]
            if bad:
                raise ValueError(f"plan {p} names blocks outside 0..{self.num_layers - 1}")
        yield from self._walk(plans, list(range(len(plans))), 0, cache.hidden[0], True, cache)

    def _walk(
        self,
        plans: Sequence[Sequence[int]],
        group: list[int],
        depth: int,
        state: torch.Tensor,
        on_base: bool,
        cache: BatchCache,
    ) -> Iterator[tuple[int, torch.Tensor]]:
        for g in group:
            if len(plans[g]) == depth:
                yield g, state
        children: dict[int, list[int]] = defaultdict(list)
        for g in group:
            if len(plans[g]) > depth:
                children[plans[g][depth]].append(g)
        for block_idx, sub in children.items():
            stays = on_base and depth < self.num_layers and block_idx == self.base_plan[depth]
            nxt = cache.hidden[depth + 1] if stays else self.run_block(block_idx, state, cache)
            yield from self._walk(plans, sub, depth + 1, nxt, stays, cache)

    @torch.no_grad()
    def run_edited(
        self,
        blocks: Sequence[int],
        state: torch.Tensor,
        cache: BatchCache,
        edits: dict[int, tuple[nn.Module, Callable[[torch.Tensor], torch.Tensor | None]]],
    ) -> torch.Tensor:
        """Run ``blocks`` in order from ``state``, each with its own captured arguments.

        While block ``b`` runs, ``edits[b] = (module, fn)`` sees the output of ``module``
        (a submodule of that block): ``fn`` returns a tensor to replace it, or ``None``
        to keep it (a tap). The hooks exist only during the call. Used to fit and check
        linear patches (:mod:`swapprune.edit.patch`).
        """
        handles = []

        def hook(fn):
            def call(module, args, output):
                out = output[0] if isinstance(output, tuple) else output
                new = fn(out)
                if new is None:
                    return None
                return (new, *output[1:]) if isinstance(output, tuple) else new

            return call

        for b in blocks:
            if b in edits:
                module, fn = edits[b]
                handles.append((b, module, fn))
        try:
            for b in blocks:
                hs = [m.register_forward_hook(hook(fn)) for bb, m, fn in handles if bb == b]
                try:
                    state = self.run_block(b, state, cache)
                finally:
                    for h in hs:
                        h.remove()
        finally:
            handles.clear()
        return state

    def final_hidden(self, plan: Sequence[int], cache: BatchCache) -> torch.Tensor:
        """The ``[B, T, H]`` state after running one plan."""
        return next(self.run_plans([plan], cache))[1]

    @torch.no_grad()
    def logits(self, plan: Sequence[int], cache: BatchCache) -> torch.Tensor:
        """Logits ``[B, T, V]`` of one plan at every position."""
        return self.stack.head(self.final_hidden(plan, cache))
