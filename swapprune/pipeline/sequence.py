"""The pipeline in one screen: ``run(config) -> RunResult``.

    read facts -> load -> calibrate -> score -> select -> edit -> heal -> save -> quantize

with evaluation at each point the configuration asks for. Every command is a
configuration handed to :func:`run` (``swapprune``/``prune``, ``score``,
``apply``, ``eval``, ``run``); ``compare`` calls the same stage functions in a
loop over configurations.

Everything a user can get wrong is checked before the weights load
(:func:`swapprune.pipeline.checks.check`: the configuration, then the model's facts read
from its ``config.json`` or GGUF header), once; the loaded model is re-checked
only when those facts could not be read or disagree with it. The output directory is built in a
hidden sibling and renamed into place at the end, so a failed run leaves no
directory that looks whole. It is a checkpoint that loads with plain
``from_pretrained`` plus ``plan.json``, ``mergekit.yaml``, ``README.md`` (model
card), ``provenance.json``, ``config.yaml`` (the resolved configuration),
``metrics.json``, ``scores.json`` (when probes were measured), ``model.gguf`` (a
GGUF input cut by a plain removal, :mod:`swapprune.gguf.decision`),
``eval/<point>.json`` and ``quantized/`` (when quantized).
"""

from __future__ import annotations

import contextlib
import copy
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swapprune.config import RunConfig
from swapprune.entry import entry_point, lines
from swapprune.output.artifacts import staging_dir, write_json_atomic
from swapprune.pipeline import checks, stages
from swapprune.pipeline import forecast as fc
from swapprune.pipeline.cut import cut
from swapprune.pipeline.record import RunBook, Say, Wording, recovery

# edit/ imports torch: it is imported inside the stages that use it, so that checking a
# run imports no torch.


@dataclass
class RunResult:
    """What a run produced.

    Attributes:
        config: the configuration that ran.
        output: the written directory (or scores / eval file), if any.
        plan: the applied :class:`~swapprune.plan.PrunePlan` (identity if nothing was cut).
        scores: the probe scores measured or reused, if any.
        metrics: costs, timings, reports (as in ``metrics.json``).
        eval: evaluation results by point (``base``, ``pruned``, ...).
        model, tokenizer: the final in-memory model and its tokenizer.
    """

    config: RunConfig
    output: Path | None = None
    plan: Any = None
    scores: Any = None
    metrics: dict = field(default_factory=dict)
    eval: dict = field(default_factory=dict)
    model: Any = None
    tokenizer: Any = None
    source: Any = None


# -- the run --------------------------------------------------------------------------------


def _kept(config: RunConfig, *args, **kwargs) -> str | None:
    """What a stopped run keeps: the probes flushed to its scores file, which resumes."""
    out = config.score.output if config.score is not None else None
    if out and Path(out).is_file():
        return f"the probes finished so far are in {out}, and the same run resumes from them"
    return None


@entry_point(kept=_kept)
def run(
    config: RunConfig,
    *,
    say: Say | None = None,
    progress: bool = True,
    command: list[str] | None = None,
    wording: Wording | None = None,
) -> RunResult:
    """Run ``config``: every stage it names, in order.

    As a ``swapprune`` command runs it (:mod:`swapprune.entry`): the same thread choice,
    and on Ctrl-C one line saying what was kept.

    Args:
        config: the run (checked here if not already).
        say: receives the ``[estimate]`` lines and one line per stage, e.g. ``print``
            (``None``: the ``swapprune`` logger at INFO, silent unless logging is on).
        progress: show progress bars.
        command: recorded in the provenance (default: ``sys.argv``).
        wording: how the front end names what the run suggests (default: ``--quick``
            for the quick settings, a cheaper cut in words).
    """
    cfg = config
    checked = checks.check(cfg)  # names, files, then budget/pairs/context: before the weights load
    text = checks.check_text(cfg, checked)  # the windows, with the tokenizer alone
    start_state = stages.output_state(cfg)  # the final rename re-checks it under a lock
    argv = list(sys.argv) if command is None else command
    book = RunBook(cfg, lines(say) or (lambda _: None), argv, wording or Wording())
    for note in checked.notes:  # a dtype chosen to fit the memory
        book.say(note)
    loaded = book.stage("load", stages.load, cfg, checked, progress)
    res = RunResult(cfg, model=loaded.model, tokenizer=loaded.tokenizer, source=loaded.source)
    book.metrics["num_layers"] = loaded.facts.num_layers
    model, tok = loaded.model, loaded.tokenizer

    scores = (
        stages.reuse_scores(cfg.prune.scores, loaded, cfg)
        if cfg.prune and cfg.prune.scores
        else None
    )
    windows = book.stage("heal windows", _heal_windows, cfg, loaded) if cfg.heal else None
    teacher = copy.deepcopy(model).eval() if cfg.heal and cfg.heal.distill else None
    book.measure("base", model, tok, windows)

    calibration = heldout = None
    if text is not None and text.context_length != loaded.facts.context_length:
        text = None  # cut for another context than the loaded model's: cut again
    if cfg.score or (cfg.prune and cfg.prune.plan is None):
        if text is not None:
            calibration, heldout = text.calibration, text.heldout
        else:
            calibration = book.stage("calibrate", stages.calibrate, cfg, loaded)
        book.metrics["calibration"] = calibration.describe()
    if cfg.score:
        forecast, quick = fc.of_scoring(cfg, loaded.facts)
        batch = cfg.calibration.batch_size
        book.forecast("score", forecast, quick, model, calibration, batch)
        scores = book.stage("score", stages.score, cfg, loaded, calibration, progress)
        if scores is None:  # non-zero torchrun rank
            return res
    if scores is not None and cfg.prune and cfg.prune.scores:
        # Reused scores: record the calibration that produced them, not this run's settings.
        book.metrics["calibration"] = scores.meta.get("calibration")
        book.metrics["scores_reused_from"] = str(Path(cfg.prune.scores).absolute())
    patches = None
    if cfg.prune:
        done = cut(
            cfg, loaded, book, calibration=calibration, scores=scores, heldout=heldout,
            progress=progress, stability=True,
        )  # fmt: skip
        plan, scores, patches = done.plan, done.scores, done.patches
    else:
        plan, scores = stages.select(cfg, loaded, calibration, scores, progress)  # identity
    res.plan, res.scores = plan, scores
    if cfg.cost is not None and cfg.prune:
        cost = book.stage("cost", stages.measure_cost, cfg, loaded, plan, patches)
        book.metrics["cost"] = cost.to_dict() | {"summary": cost.summary()}
        if cost.warning:
            book.say(cost.warning)

    if cfg.prune:
        from swapprune.edit.surgery import apply_plan  # imports torch

        book.stage("edit", apply_plan, model, plan, None, patches)
        book.measure("pruned", model, tok, None if cfg.heal else windows)
    if cfg.heal:
        from swapprune.edit.healing import heal  # imports torch

        model, report = book.stage(
            "heal",
            heal,
            model,
            tok,
            cfg.heal,
            plan=plan,
            teacher=teacher,
            windows=windows,
            progress=lambda s: book.say(f"  {s}"),
        )
        del teacher
        res.model = model
        book.metrics["heal"] = report.to_dict()
        if cfg.prune:
            book.metrics["costs"]["pruned"]["heldout_ppl"] = report.heldout_ppl_before
        book.measure("healed", model, tok, None, heldout=report.heldout_ppl_after)
        book.metrics["recovery"] = recovery(book.metrics["costs"])

    with contextlib.ExitStack() as stack:
        directory = None
        if cfg.export:
            directory = stack.enter_context(
                staging_dir(
                    cfg.export.output,
                    overwrite=cfg.export.overwrite,
                    expected=start_state,
                    needs=stages.model_bytes(model, cfg),
                )
            )
            book.stage(
                "save",
                book.save_model,
                directory,
                model,
                tok,
                plan,
                loaded.source,
                calibration,
                scores,
                patches,
            )
        if cfg.quantize:
            from swapprune.edit.quantization import quantize_model  # imports torch

            book.metrics["quantize"] = book.stage(
                "quantize", quantize_model, model, cfg.quantize
            ).to_dict()
            book.measure("quantized", model, tok, windows)
            if directory is not None:
                book.stage(
                    "save quantized", book.save_quantized, directory, model, tok, plan, calibration
                )
        book.metrics["total_s"] = round(time.perf_counter() - book.start, 2)
        if directory is not None:
            book.finish(directory, plan, scores)
    res.metrics, res.eval = book.metrics, book.results
    if cfg.export:
        res.output = Path(cfg.export.output).expanduser().absolute()
        book.say(f"[done] wrote {res.output}")
    elif cfg.score and cfg.score.output:
        res.output = Path(cfg.score.output).expanduser().absolute()
    if cfg.eval and cfg.eval.output:
        res.output = _write_eval(cfg.eval.output, book.results.get("base"), loaded.source.id)
    return res


def _heal_windows(cfg: RunConfig, loaded: stages.Loaded):
    from swapprune.edit.healing import heal_windows  # imports torch

    assert cfg.heal is not None
    return heal_windows(loaded.tokenizer, cfg.heal, loaded.facts.context_length)


def _write_eval(path: str, result, model_id: str) -> Path:
    data = json.loads(result.to_json())
    data["model"] = model_id
    write_json_atomic(path, data)
    return Path(path).expanduser().absolute()
