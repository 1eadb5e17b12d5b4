"""What a cut cost: base vs pruned perplexity with a paired bootstrap CI.

Measured on the matched contract (:mod:`swapprune.evaluation.perplexity`:
WikiText-2 test, first 5K words, windows of 512 tokens, stride 256), either
in full or, by default, on its first :data:`QUICK_WINDOWS` windows: enough to
tell a usable cut from a broken one in well under a minute on a CPU for a
135M model, not enough for a paper table (use ``windows=None`` there).

Base and pruned come from one loaded model: the pruned model is a zero-copy
view (:func:`swapprune.edit.surgery.pruned_view`) of the blocks a removal plan
keeps. A merge plan has no such view; pass the merged model as ``pruned``.

The cost is ``dPPL% = PPL_pruned / PPL_base - 1``; its 95% CI is a paired
bootstrap over windows (same windows for both models). The verdict is one of
the four outcomes of :mod:`swapprune.stats.verdicts` (``cut better``, ``base
better``, ``tie (equivalent within +-2 pts)``, ``inconclusive (MDD x pts)``) or
``identical`` for the identity plan, which is not tested. Above
:data:`THRESHOLD` the record carries a warning and the next step.

With ``generative=True`` (the default, as ``CostConfig.generative``) the record
also holds the greedy-continuation agreement of the cut with the base model
(:mod:`swapprune.evaluation.generative`: 32 prompts, 32 tokens; on SmolLM2-135M
with one CPU thread about 27 s for the base model's reference and 10 s for the
cut).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from swapprune.errors import SwappruneError
from swapprune.evaluation import base_cache, contract
from swapprune.evaluation import generative as g
from swapprune.evaluation.generative import generative_cost
from swapprune.evaluation.pairing import compare
from swapprune.evaluation.perplexity import (
    TEST_TEXT,
    first_words,
    run_wikitext2_ppl,
    sliding_windows,
    tokenize,
)
from swapprune.evaluation.quiet import quiet_lm_eval
from swapprune.evaluation.results import EvalResult
from swapprune.evaluation.suite import _offline
from swapprune.stats import bootstrap
from swapprune.stats.verdicts import cut_key

# edit.surgery and model.stack import torch, and lm-eval is heavy: they are imported
# where a model is measured.

# First windows of the matched contract scored by the quick check: 8 windows
# of 512 tokens moved by 256 cover about 2.3K scored tokens (the full 5K-word
# contract is about 25 windows with SmolLM2's tokenizer).
QUICK_WINDOWS = 8
# dPPL above +50% warns. On SmolLM2-135M (eval/study) a +59% cut (SLEB, 3 of
# 30 blocks) already took LAMBADA accuracy from 0.30 to 0.13.
THRESHOLD = 0.5
TASK = contract.TASK


@dataclass
class Cost:
    """The measured cost of one pruned model.

    Attributes:
        base_ppl, pruned_ppl: perplexity of each on the same windows.
        dppl: ``pruned / base - 1`` (0.25 = +25%).
        ci: its 95% paired-bootstrap CI.
        verdict: the four-outcome label of base vs cut, or ``identical``
            (:attr:`comparison` holds the whole record).
        windows: windows scored; ``contract_windows``: all windows of the contract.
        threshold: dPPL above which :attr:`warning` is set.
        warning: one line naming the next step, or ``None``.
        seconds: wall time of both evaluations.
    """

    base_ppl: float
    pruned_ppl: float
    dppl: float
    ci: tuple[float, float]
    verdict: str
    windows: int
    contract_windows: int
    words: int
    max_length: int
    threshold: float = THRESHOLD
    warning: str | None = None
    seconds: float = 0.0
    unpatched: dict | None = None  # with a linear patch: the plain removal's cost record
    comparison: dict | None = None  # the Verdict record behind ``verdict``
    generative: dict | None = None  # GenerativeCost.to_dict(), when measured
    generative_summary: str | None = None
    base_cached: dict | None = None  # which base-side measurements came from the cache

    def summary(self) -> str:
        """The run summary's lines: the perplexity cost, then the generation's agreement."""
        # Said every time: perplexity depends on the windows, so the same base model reads
        # differently on the first 8 windows than on the whole contract (``swapprune eval``).
        part = (
            f" (all {self.windows} windows)"
            if self.windows == self.contract_windows
            else f" (first {self.windows} of {self.contract_windows} windows)"
        )
        line = (
            f"cost: WikiText-2 perplexity {self.base_ppl:.4g} -> {self.pruned_ppl:.4g}, "
            f"dPPL {self.dppl:+.1%} [{self.ci[0]:+.1%}, {self.ci[1]:+.1%}]{part}"
        )
        if self.unpatched:
            line += f" with the linear patch; without it {self.unpatched['dppl']:+.1%}"
        if self.generative_summary:
            line += "\n" + self.generative_summary
        return line

    def to_dict(self) -> dict:
        """Record for ``provenance.json`` and the model card."""
        return {
            "task": TASK,
            "metric": "perplexity",
            "base_ppl": self.base_ppl,
            "pruned_ppl": self.pruned_ppl,
            "dppl": self.dppl,
            "ci": list(self.ci),
            "ci_method": "95% paired percentile bootstrap over windows",
            "verdict": self.verdict,
            "comparison": self.comparison,
            "generative": self.generative,
            "windows": self.windows,
            "contract": {
                "words": self.words,
                "max_length": self.max_length,
                "stride": contract.stride(self.max_length),
                "windows": self.contract_windows,
            },
            "threshold": self.threshold,
            "warning": self.warning,
            "seconds": self.seconds,
            "base_cached": self.base_cached,
            **({"unpatched": self.unpatched} if self.unpatched else {}),
        }


def next_step(budget: int | None, protocol: str | None = None, patch: str = "none") -> str:
    """What to try after a cut above the warning: a smaller budget, ``auto``, the patch.

    ``patch``: ``none`` (suggest ``--patch linear``), ``linear`` (the cut is patched:
    suggest ``--patch-aware``, which picks the set for the patched model) or ``aware``
    (already chosen so: the patch is not suggested again).
    """
    smaller = (
        f"a smaller budget (--budget {budget // 2})"
        if budget and budget > 1
        else "a smaller budget"
    )
    auto = "" if protocol == "auto" else "--protocol auto (the cheapest cut it can verify)"
    more = {
        "none": "--patch linear (a map fitted over each removed span)",
        "linear": "--patch-aware (sets compared after their own patch)",
    }.get(patch)
    tail = [t for t in (auto, more) if t]
    if not tail:
        return smaller
    return f"{smaller}, " + (f"{tail[0]}, or {tail[1]}" if len(tail) == 2 else f"or {tail[0]}")


def pruning_cost(
    model,
    tokenizer,
    plan=None,
    *,
    pruned=None,
    windows: int | None = QUICK_WINDOWS,
    words: int = contract.WORDS,
    max_length: int = contract.MAX_LENGTH,
    batch_size: int = 8,
    n_boot: int = bootstrap.N_BOOT,
    threshold: float = THRESHOLD,
    text: str | None = None,
    generative: bool = True,
    reference=None,
) -> Cost:
    """Measure base vs pruned perplexity and the pruning cost with its CI.

    Args:
        model: the unpruned model (left as it was).
        tokenizer: its tokenizer.
        plan: a removal :class:`~swapprune.plan.PrunePlan` (or the kept blocks) to
            evaluate as a view of ``model``.
        pruned: the pruned model itself, instead of ``plan`` (merge plans).
        windows: score the first ``windows`` windows of the contract; ``None``: all.
        words, max_length: the contract (5000 words, 512-token windows, stride half).
        batch_size: windows per forward pass.
        n_boot: bootstrap resamples.
        threshold: dPPL above which the record warns.
        text: override of the evaluation text (tests).
        generative: also measure greedy-continuation agreement with ``model``.
        reference: :func:`~swapprune.evaluation.generative.reference_continuations` of
            ``model`` to reuse (computed here when needed and not given).

    The base model's perplexity and reference continuations are read from
    :mod:`~swapprune.evaluation.base_cache` when an earlier run measured them with the
    same model and setting (``base_cached`` in the record says which).
    """
    if (plan is None) == (pruned is None):
        raise SwappruneError("pruning_cost needs a removal plan or the pruned model (one of them)")
    if windows is not None and windows < 2:
        raise SwappruneError(f"the cost needs at least 2 windows, got {windows}")
    if plan is not None and getattr(plan, "op", "remove") != "remove":
        raise SwappruneError("a merge plan has no zero-copy view; pass the merged model as pruned=")
    from swapprune.edit.surgery import pruned_view  # imports torch

    kept = list(getattr(plan, "kept", plan)) if plan is not None else None
    start = time.perf_counter()

    def ppl(m) -> EvalResult:
        with _offline(True), quiet_lm_eval():
            from lm_eval.models.huggingface import HFLM  # imports lm_eval

            lm = HFLM(
                pretrained=m, tokenizer=tokenizer, max_length=max_length, batch_size=batch_size
            )
            res = run_wikitext2_ppl(
                lm,
                tokenizer,
                words=words,
                max_length=max_length,
                limit=windows,
                text=text,
                n_boot=n_boot,
            )
        return EvalResult(tasks={TASK: res}, config={})

    setting = _ppl_setting(tokenizer, text, words, max_length, windows, batch_size, n_boot)
    base, ppl_hit = base_cache.base_side(
        model, "ppl", setting, lambda: ppl(model),
        dump=lambda r: {"json": np.array(r.to_json())},
        load=lambda a: EvalResult.from_json(str(a["json"])),
    )  # fmt: skip
    cached = {"perplexity": ppl_hit}
    if kept is not None:
        with pruned_view(model, kept) as view:
            after = ppl(view)
    else:
        after = ppl(pruned)
    L = _num_blocks(model)
    keys = (cut_key(range(L)), cut_key(kept) if kept is not None else "pruned model")
    cmp, verdict = compare(base, after, TASK, n_boot=n_boot, names=("base", "cut"), keys=keys)
    dppl = cmp.ratio.estimate - 1
    info = base.tasks[TASK].info
    total = len(sliding_windows(info["n_tokens"], max_length, contract.stride(max_length)))
    cost = Cost(
        base_ppl=cmp.a,
        pruned_ppl=cmp.b,
        dppl=dppl,
        ci=(cmp.ratio.low - 1, cmp.ratio.high - 1),
        verdict=verdict.sentence,
        comparison=verdict.to_dict(),
        windows=info["n_windows"],
        contract_windows=total,
        words=words,
        max_length=max_length,
        threshold=threshold,
    )
    if generative:
        if reference is None:
            reference, cached["generation"] = _reference(model, tokenizer, batch_size)
        gen = generative_cost(
            model,
            tokenizer,
            kept,
            pruned=pruned,
            reference=reference,
            batch_size=batch_size,
            n_boot=n_boot,
        )
        cost.generative, cost.generative_summary = gen.to_dict(), gen.summary()
    cost.base_cached = cached
    cost.seconds = time.perf_counter() - start
    if dppl > threshold:
        budget = getattr(plan, "budget", None) if plan is not None else None
        protocol = getattr(plan, "protocol", None) if plan is not None else None
        patch = "none" if getattr(plan, "patch", None) is None else "linear"
        cert = getattr(getattr(plan, "records", None), "certificate", None)
        if patch == "linear" and (getattr(cert, "extra", None) or {}).get("patched"):
            patch = "aware"
        cost.warning = (
            f"warning: this cut raises perplexity by {dppl:+.0%} "
            f"[{cost.ci[0]:+.0%}, {cost.ci[1]:+.0%}], above {threshold:+.0%}; "
            f"try {next_step(budget, protocol, patch)}"
        )
    return cost


def _ids_digest(ids) -> str:
    return base_cache.text_digest(" ".join(map(str, ids)))


def _ppl_setting(tokenizer, text, words, max_length, windows, batch_size, n_boot) -> dict:
    source = TEST_TEXT.read_text(encoding="utf-8") if text is None else text
    ids = tokenize(tokenizer, first_words(source, words))
    return {"words": words, "max_length": max_length, "windows": windows,
            "batch_size": batch_size, "n_boot": n_boot, "ids": _ids_digest(ids)}  # fmt: skip


def _generation_setting(tokenizer, batch_size: int) -> dict:
    prompts = g.prompt_ids(tokenizer, g.prompt_texts(g.N_PROMPTS), g.PROMPT_TOKENS)
    return {"prompts": _ids_digest(prompts.reshape(-1).tolist()),
            "new_tokens": g.NEW_TOKENS, "batch_size": batch_size}  # fmt: skip


def base_side_cached(
    model,
    tokenizer,
    windows: int | None = QUICK_WINDOWS,
    generative: bool = True,
    batch_size: int = 8,
    n_boot: int = bootstrap.N_BOOT,
    words: int = contract.WORDS,
    max_length: int = contract.MAX_LENGTH,
) -> bool:
    """Whether :func:`pruning_cost` with these settings would read the whole base side from
    the cache (for the estimate printed before a run)."""
    ppl = _ppl_setting(tokenizer, None, words, max_length, windows, batch_size, n_boot)
    if not base_cache.has(model, "ppl", ppl):
        return False
    return not generative or base_cache.has(
        model, "generation", _generation_setting(tokenizer, batch_size)
    )


def _reference(model, tokenizer, batch_size: int):
    """The base model's reference continuations, from the cache when it has them."""
    setting = _generation_setting(tokenizer, batch_size)

    def load(a):
        import torch  # imports torch

        device = next(model.parameters()).device
        return g.Reference(
            torch.from_numpy(a["sequence"]).to(device), torch.from_numpy(a["choices"]),
            int(a["prompt_tokens"]), int(a["new_tokens"]), float(a["seconds"]),
        )  # fmt: skip

    def dump(r):
        return {"sequence": r.sequence.cpu().numpy(), "choices": r.choices.cpu().numpy(),
                "prompt_tokens": np.array(r.prompt_tokens), "new_tokens": np.array(r.new_tokens),
                "seconds": np.array(r.seconds)}  # fmt: skip

    return base_cache.base_side(
        model, "generation", setting,
        lambda: g.reference_continuations(model, tokenizer, batch_size=batch_size), dump, load,
    )  # fmt: skip


def _num_blocks(model) -> int:
    """The decoder depth of ``model`` (its config's count, else the block list's length)."""
    from swapprune.model.stack import decoder_stack  # imports torch

    return len(decoder_stack(model).blocks)
