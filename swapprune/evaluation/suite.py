"""``evaluate``: run an in-memory model on swapprune and lm-eval tasks."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version

from swapprune.evaluation import contract
from swapprune.evaluation.extended import PER_ARTICLE, run_wikitext2_extended
from swapprune.evaluation.harness import run_harness
from swapprune.evaluation.names import (
    EXTENDED_PPL,
    NATIVE_TASKS,
    WIKITEXT2_PPL,
    check_known,
    needs_lm_eval_defaults,
    resolve_tasks,
    task_manager,
)
from swapprune.evaluation.perplexity import run_wikitext2_ppl
from swapprune.evaluation.quiet import quiet_lm_eval
from swapprune.evaluation.results import EvalResult, TaskResult
from swapprune.stats import bootstrap

_OFFLINE = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")


@contextlib.contextmanager
def _offline(enabled: bool) -> Iterator[None]:
    """Set the Hugging Face offline switches while inside, unless the user set them.

    The pack reads only vendored files; the switches make any accidental hub
    access fail instead of hanging on a machine without network. Runs that name
    lm-eval's own tasks keep the user's environment, since those download.
    """
    saved = {k: os.environ.get(k) for k in _OFFLINE}
    if enabled:
        for k in _OFFLINE:
            os.environ.setdefault(k, "1")
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def evaluate(
    model,
    tokenizer,
    tasks: list[str],
    limit: int | None = None,
    words: int = contract.WORDS,
    max_length: int = contract.MAX_LENGTH,
    batch_size: int = 8,
    n_boot: int = bootstrap.N_BOOT,
    per_article: int = PER_ARTICLE,
) -> EvalResult:
    """Evaluate ``model`` on ``tasks`` through lm-eval's ``HFLM``.

    Task names are validated before the model is touched. lm-eval tasks run in
    one harness call (with per-sample logging); ``swapprune_wikitext2_ppl`` runs
    its token-space windows through the same ``HFLM``.

    Args:
        model: A causal LM (``PreTrainedModel``), already on its device.
        tokenizer: Its tokenizer. lm-eval sets a pad token if it has none.
        tasks: Task names or aliases (see :func:`resolve_tasks`).
        limit: Examples per lm-eval task, windows for the perplexity task
            (None: all; for quick checks only).
        words: Words of WikiText-2 test scored by ``swapprune_wikitext2_ppl``
            (and skipped by ``swapprune_wikitext2_ext``).
        max_length: Model context in tokens: the perplexity window, and
            lm-eval's truncation length for every other task.
        batch_size: Sequences per forward pass.
        n_boot: Bootstrap resamples for every CI.
        per_article: Windows per article of ``swapprune_wikitext2_ext``.

    Returns:
        Metrics with 95% CIs and the per-unit values behind them.

    Raises:
        SwappruneError: On unknown task names or an impossible setting.
    """
    names = resolve_tasks(tasks)
    harness_names = [n for n in names if n not in NATIVE_TASKS]
    foreign = needs_lm_eval_defaults(names)
    start = time.perf_counter()
    with _offline(not foreign), quiet_lm_eval():
        from lm_eval.models.huggingface import HFLM  # imports lm_eval

        lm = HFLM(
            pretrained=model, tokenizer=tokenizer, max_length=max_length, batch_size=batch_size
        )
        done: dict[str, TaskResult] = {}
        if harness_names:
            manager = task_manager(include_defaults=foreign)
            check_known(harness_names, manager)
            done.update(run_harness(lm, harness_names, manager, limit, n_boot))
        if WIKITEXT2_PPL in names:
            done[WIKITEXT2_PPL] = run_wikitext2_ppl(
                lm, tokenizer, words=words, max_length=max_length, limit=limit, n_boot=n_boot
            )
        if EXTENDED_PPL in names:
            # Skips exactly the words the matched contract scores, so the two never overlap.
            done[EXTENDED_PPL] = run_wikitext2_extended(
                lm,
                tokenizer,
                skip_words=words,
                max_length=max_length,
                per_article=per_article,
                limit=limit,
                n_boot=n_boot,
            )
    # Report in the order asked; the leaves of tags and groups follow, in lm-eval order.
    ordered = {n: done.pop(n) for n in names if n in done}
    ordered.update(done)
    return EvalResult(
        tasks=ordered,
        config={
            "tasks": names,
            "limit": limit,
            "words": words,
            "max_length": max_length,
            "batch_size": batch_size,
            "n_boot": n_boot,
            "per_article": per_article if EXTENDED_PPL in names else None,
            "ci_level": bootstrap.LEVEL,
            "wall_s": time.perf_counter() - start,
            "lm_eval_version": _version("lm_eval"),
            "transformers_version": _version("transformers"),
        },
    )


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None
