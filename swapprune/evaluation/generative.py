"""Generative agreement: does the pruned model still continue text as the base model does?

Perplexity averages over every token; field reports say generation collapses
first after depth pruning. This measure asks the generative question directly,
on a fixed set of prompts:

1. **Prompts.** :data:`N_PROMPTS` (32) passages of the vendored LAMBADA test set
   (``swapprune/data/lambada_openai_test.jsonl``, rows ``i * 5153 // 32``,
   spread over the file), each without its final word (LAMBADA's target),
   tokenised without special tokens and cut to its last :data:`PROMPT_TOKENS`
   (48) tokens, so every prompt has the same length and a batch needs no padding.
2. **Reference.** The base model continues each prompt greedily for
   :data:`NEW_TOKENS` (32) tokens (argmax, with its KV cache; EOS suppressed so
   that every continuation is full length): the base continuation ``g``.
3. **Choices.** Each model reads ``prompt + g`` in one teacher-forced pass;
   its choice at continuation position ``t`` is the argmax of its next-token
   logits after ``prompt + g[:t]``.
4. **Per prompt.** *First divergence* ``f``: the first ``t`` at which the pruned
   model's choice differs from the base model's (``NEW_TOKENS`` if none). Up to
   ``f`` the two models read the same text, so ``f`` is exactly where the pruned
   model's own greedy continuation would first leave the base's.
   *Agreement*: the fraction of the ``NEW_TOKENS`` positions at which the two
   choices agree, each position given the base's prefix, so it counts positions
   **before and after** the first divergence. After a divergence it asks whether
   the pruned model would come back to the base's path; comparing two
   free-running continuations there would compare continuations of different
   texts, whose matches are coincidences.
5. **Uncertainty.** Means over prompts with 95% percentile-bootstrap CIs over prompts.

Why teacher forcing: a pruned view (:func:`swapprune.edit.surgery.pruned_view`)
cannot use the KV cache (its blocks keep their original layer indices), so a
free-running continuation costs one full forward per new token; teacher forcing
costs one forward per model, and the reference is computed once per base model
and reused for every cut (:func:`reference_continuations`). Both models'
choices come from forward passes of the same shape, so the identity plan agrees
bitwise: agreement 1.0, first divergence ``NEW_TOKENS``.

Measured on SmolLM2-135M, one thread, on this project's shared 2-core CPU
(load average 4-5 from other work): the reference, once per base model, 27
CPU-seconds (45 s of wall time); each cut, 9-11 CPU-seconds (13-21 s). Two
blocks removed ({12, 14}) gave agreement 74% [70%, 78%] and a first divergence
at token 2.2 [0.8, 4.5] of 32.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from swapprune.errors import SwappruneError
from swapprune.stats import bootstrap

LAMBADA = Path(__file__).resolve().parent.parent / "data" / "lambada_openai_test.jsonl"
N_PROMPTS = 32
PROMPT_TOKENS = 48
NEW_TOKENS = 32


def prompt_texts(n_prompts: int = N_PROMPTS) -> list[str]:
    """The LAMBADA passages (without their final word) the measure continues."""
    rows = LAMBADA.read_text(encoding="utf-8").splitlines()
    if not 2 <= n_prompts <= len(rows):
        raise SwappruneError(f"n_prompts must be in [2, {len(rows)}], got {n_prompts}")
    texts = [json.loads(rows[i * len(rows) // n_prompts])["text"] for i in range(n_prompts)]
    return [t.rsplit(" ", 1)[0] for t in texts]


def prompt_ids(tokenizer, texts: list[str], prompt_tokens: int = PROMPT_TOKENS):
    """``[n, prompt_tokens]`` token ids: the last ``prompt_tokens`` of each text."""
    import torch  # imports torch

    rows = []
    for i, text in enumerate(texts):
        ids = list(tokenizer(text, add_special_tokens=False).input_ids)
        if len(ids) < prompt_tokens:
            raise SwappruneError(
                f"prompt {i} has {len(ids)} tokens, fewer than prompt_tokens={prompt_tokens}"
            )
        rows.append(ids[-prompt_tokens:])
    return torch.tensor(rows, dtype=torch.long)


def _device(model):
    return next(model.parameters()).device


def greedy_continuation(model, ids, new_tokens: int = NEW_TOKENS, pad_token_id: int = 0):
    """``[n, new_tokens]`` greedy continuation of ``ids`` ``[n, p]`` with the KV cache.

    Argmax at every step; EOS is suppressed (``min_new_tokens``) so that every
    continuation has ``new_tokens`` tokens and no padding is needed.
    """
    import torch  # imports torch

    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            use_cache=True,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=pad_token_id,
        )
    return out[:, ids.shape[1] :]


def teacher_forced_choices(model, sequence, new_tokens: int, batch_size: int = 8):
    """``[n, new_tokens]`` argmax choices of ``model`` at the last ``new_tokens`` positions.

    Args:
        model: A causal LM.
        sequence: ``[n, p + new_tokens]``: prompts followed by the reference continuation.
        new_tokens: Continuation length.
        batch_size: Prompts per forward pass (bounds the ``[b, new_tokens, vocab]`` logits).
    """
    import torch  # imports torch

    # The last token is never read; the logits at positions p-1 .. p+T-2 predict
    # the T continuation tokens.
    inputs = sequence[:, :-1]
    out = []
    with torch.no_grad():
        for start in range(0, inputs.shape[0], batch_size):
            logits = model(
                input_ids=inputs[start : start + batch_size],
                use_cache=False,
                logits_to_keep=new_tokens,
            ).logits  # [b, T, V]
            out.append(logits.argmax(-1))
    return torch.cat(out)


@dataclass
class Reference:
    """The base model's side of the measure, computed once and reused for every cut.

    Attributes:
        sequence: ``[n, prompt_tokens + new_tokens]`` prompts + greedy continuation.
        choices: ``[n, new_tokens]`` the base model's teacher-forced choices.
        prompt_tokens, new_tokens: Lengths.
        seconds: Wall time to build it.
    """

    sequence: Any
    choices: Any
    prompt_tokens: int
    new_tokens: int
    seconds: float


def reference_continuations(
    model,
    tokenizer,
    n_prompts: int = N_PROMPTS,
    prompt_tokens: int = PROMPT_TOKENS,
    new_tokens: int = NEW_TOKENS,
    batch_size: int = 8,
) -> Reference:
    """Greedy continuations of the prompts by the base ``model``, and its own choices."""
    import torch  # imports torch

    if new_tokens < 1 or prompt_tokens < 1:
        raise SwappruneError("new_tokens and prompt_tokens must be >= 1")
    start = time.perf_counter()
    ids = prompt_ids(tokenizer, prompt_texts(n_prompts), prompt_tokens).to(_device(model))
    pad = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)
    # All prompts in one batch: a cached step costs little per row, so the
    # number of steps, not of rows, sets the time.
    cont = greedy_continuation(model, ids, new_tokens, pad)
    sequence = torch.cat([ids, cont], dim=1)
    choices = teacher_forced_choices(model, sequence, new_tokens, batch_size)
    return Reference(sequence, choices, prompt_tokens, new_tokens, time.perf_counter() - start)


@dataclass
class GenerativeCost:
    """Agreement of a pruned model's greedy choices with the base model's.

    Attributes:
        agreement: Mean over prompts of the fraction of positions agreeing, with its CI.
        first_divergence: Mean over prompts of the first disagreeing position
            (``new_tokens`` when none), with its CI.
        unchanged: Prompts on which every position agrees.
        per_prompt_agreement, per_prompt_divergence: The values behind the means.
        n_prompts, prompt_tokens, new_tokens: The setting.
        seconds: Wall time of the pruned model's pass; ``reference_seconds``: of the base's.
    """

    agreement: bootstrap.Interval
    first_divergence: bootstrap.Interval
    unchanged: int
    per_prompt_agreement: list[float]
    per_prompt_divergence: list[int]
    n_prompts: int
    prompt_tokens: int
    new_tokens: int
    seconds: float
    reference_seconds: float
    source: str = field(
        default="LAMBADA test (vendored), evenly spaced rows, final word removed, last tokens"
    )

    def summary(self) -> str:
        """One line for the run summary."""
        a, f = self.agreement, self.first_divergence
        return (
            f"generation: greedy agreement with the base {a.estimate:.0%} [{a.low:.0%}, {a.high:.0%}], "
            f"the continuations stay identical for {f.estimate:.1f} [{f.low:.1f}, {f.high:.1f}] "
            f"of {self.new_tokens} tokens on average ({self.unchanged}/{self.n_prompts} prompts "
            "unchanged)"
        )

    def to_dict(self) -> dict:
        """Record for ``provenance.json``, ``metrics.json`` and the model card."""
        a, f = self.agreement, self.first_divergence
        return {
            "measure": "greedy choices given the base model's greedy continuation (teacher-forced)",
            "prompts": {
                "source": self.source,
                "n": self.n_prompts,
                "tokens": self.prompt_tokens,
            },
            "new_tokens": self.new_tokens,
            "agreement": {"mean": a.estimate, "ci": [a.low, a.high]},
            "first_divergence": {"mean": f.estimate, "ci": [f.low, f.high]},
            "unchanged_prompts": self.unchanged,
            "per_prompt": {
                "agreement": self.per_prompt_agreement,
                "first_divergence": self.per_prompt_divergence,
            },
            "ci_method": "95% percentile bootstrap over prompts",
            "seconds": self.seconds,
            "reference_seconds": self.reference_seconds,
        }


def generative_cost(
    model,
    tokenizer,
    plan=None,
    *,
    pruned=None,
    reference: Reference | None = None,
    n_prompts: int = N_PROMPTS,
    prompt_tokens: int = PROMPT_TOKENS,
    new_tokens: int = NEW_TOKENS,
    batch_size: int = 8,
    n_boot: int = bootstrap.N_BOOT,
) -> GenerativeCost:
    """Measure how far a cut's greedy choices follow the base model's.

    Args:
        model: The unpruned model (left as it was).
        tokenizer: Its tokenizer.
        plan: A removal :class:`~swapprune.plan.PrunePlan` (or the kept blocks),
            evaluated as a zero-copy view of ``model``.
        pruned: The pruned model itself, instead of ``plan`` (merge plans).
        reference: :func:`reference_continuations` of ``model``, to reuse across cuts.
        n_prompts, prompt_tokens, new_tokens: The setting (``reference`` fixes it when given).
        batch_size: Prompts per teacher-forced forward pass.
        n_boot: Bootstrap resamples.

    Raises:
        SwappruneError: Without exactly one of ``plan`` and ``pruned``, or with a merge plan.
    """
    from swapprune.edit.surgery import pruned_view  # imports torch

    if (plan is None) == (pruned is None):
        raise SwappruneError(
            "generative_cost needs a removal plan or the pruned model (one of them)"
        )
    if plan is not None and getattr(plan, "op", "remove") != "remove":
        raise SwappruneError("a merge plan has no zero-copy view; pass the merged model as pruned=")
    if reference is None:
        reference = reference_continuations(
            model, tokenizer, n_prompts, prompt_tokens, new_tokens, batch_size
        )
    start = time.perf_counter()
    t = reference.new_tokens
    if plan is not None:
        with pruned_view(model, list(getattr(plan, "kept", plan))) as view:
            choices = teacher_forced_choices(view, reference.sequence, t, batch_size)
    else:
        choices = teacher_forced_choices(
            pruned, reference.sequence.to(_device(pruned)), t, batch_size
        )
    same = (choices.cpu() == reference.choices.cpu()).numpy()  # [n, T]
    agree = same.mean(axis=1)
    # First False per row; rows that never diverge get T.
    first = np.where(same.all(axis=1), t, np.argmin(same, axis=1))
    return GenerativeCost(
        agreement=bootstrap.ci_mean(agree, n_boot=n_boot),
        first_divergence=bootstrap.ci_mean(first.astype(float), n_boot=n_boot),
        unchanged=int(same.all(axis=1).sum()),
        per_prompt_agreement=[float(x) for x in agree],
        per_prompt_divergence=[int(x) for x in first],
        n_prompts=int(same.shape[0]),
        prompt_tokens=reference.prompt_tokens,
        new_tokens=t,
        seconds=time.perf_counter() - start,
        reference_seconds=reference.seconds,
    )
