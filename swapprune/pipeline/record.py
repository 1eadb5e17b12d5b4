"""How a sequence runs its steps, and what a run records.

:class:`Steps` runs each step of a sequence and says what the work will take before
it starts (the forecast, :mod:`swapprune.pipeline.forecast`); :class:`RunBook`, the
run's, also times each step, says a line for it and records timings, costs at each
point, and the output files. :class:`Wording` is how the front end
that started the sequence names what it suggests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from swapprune.config import RunConfig
from swapprune.gguf.save import save_gguf, writes_gguf
from swapprune.model.load import resolve_dtype
from swapprune.output.artifacts import versions, write_json_atomic, write_text_atomic
from swapprune.output.card import card_lines
from swapprune.pipeline import forecast as fc
from swapprune.pipeline.stages import evaluate
from swapprune.serving.report import ServingReport

if TYPE_CHECKING:
    pass

# edit/ and output.checkpoint import torch: they are imported inside the steps that
# use them, so that checking a run imports no torch.

Say = Callable[[str], None]


@dataclass(frozen=True)
class Wording:
    """How the front end that started a sequence names the steps it suggests.

    Attributes:
        quick: how the quick settings (:data:`swapprune.config.QUICK`) are asked for:
            ``--quick`` on the command line, ``--set ...`` for a recipe, keyword
            arguments in Python.
    """

    quick: str = "--quick"


class Steps:
    """Runs the steps of a sequence, and says their forecast to ``say``.

    Without ``say`` nothing is said and no forecast is made; with ``lines`` (the Python
    API's) each step also gets the run's two lines, ``[name] ...`` and ``[name] done in``.
    ``metrics`` collects what the steps record (kept in ``metrics.json`` by
    :class:`RunBook`, dropped here).
    """

    def __init__(self, say: Say | None = None, wording: Wording | None = None, lines: bool = False):
        self.announces = say is not None
        self.say: Say = say or (lambda _: None)
        self.wording = wording or Wording()
        self.lines = lines and say is not None
        self.metrics: dict = {}
        self.rates = None  # the timing of the first forecast, shared by the next

    def stage(self, name: str, fn, *args, **kwargs):
        """Run one step: ``fn(*args, **kwargs)``, said in two lines with ``lines``."""
        if not self.lines:
            return fn(*args, **kwargs)
        t0 = time.perf_counter()
        self.say(f"[{name}] ...")
        out = fn(*args, **kwargs)
        self.say(f"[{name}] done in {time.perf_counter() - t0:.1f}s" + _summary(name, out))
        return out

    def forecast(
        self, kind: str, forecast: fc.Forecast, quick, model, calibration, batch_size: int
    ) -> None:
        """Say what the ``kind`` part of the sequence will do and how long it takes, timed
        here on ``calibration`` unless the work is small (or a forecast was timed before);
        ``quick``: the same at the quick settings, named when the work is long on a CPU."""
        forecast.quick_flag = self.wording.quick
        self.rates = fc.announce(
            forecast, model, calibration, batch_size, self.say, quick, self.rates
        )
        self.metrics.setdefault("estimate", {})[kind] = fc.record(forecast)


def recovery(costs: dict) -> dict:
    """Recovered fraction ``(pruned - healed) / (pruned - base)`` for each cost measured."""
    out: dict = {}
    for metric in costs.get("healed", {}):
        base, pruned, healed = (costs.get(p, {}).get(metric) for p in ("base", "pruned", "healed"))
        if None in (base, pruned, healed):
            continue
        gap = pruned - base
        out[metric] = {
            "base": base,
            "pruned": pruned,
            "healed": healed,
            "fraction": (pruned - healed) / gap if gap > 0 else None,
        }
    # Evaluation's WikiText-2 test perplexity is held out from all calibration text.
    out["primary"] = next((m for m in ("wikitext2_ppl", "heldout_ppl") if m in out), None)
    return out


class RunBook(Steps):
    """Timings, metrics, evaluations at each point, and the files of the output directory."""

    def __init__(self, config: RunConfig, say: Say, command: list[str], wording: Wording):
        super().__init__(say, wording)
        self.config, self.command = config, command
        self.metrics = {"costs": {}, "eval": {}, "wall_s": {}}
        self.results: dict = {}
        self.start = time.perf_counter()

    def stage(self, name: str, fn, *args, **kwargs):
        t0 = time.perf_counter()
        self.say(f"[{name}] ...")
        out = fn(*args, **kwargs)
        dt = time.perf_counter() - t0
        self.metrics["wall_s"][name] = round(dt, 2)
        said = _summary(name, out)
        if name.startswith("held-out ppl") and self.config.heal is not None:
            said += f" on {self.config.heal.heldout} held-out windows"  # ppl varies with windows
        self.say(f"[{name}] done in {dt:.1f}s" + said)
        return out

    def measure(self, point: str, model, tok, windows, heldout: float | None = None) -> None:
        """Costs at ``point``: held-out heal windows (if healing) and the eval tasks (if asked)."""
        costs = self.metrics["costs"].setdefault(point, {})
        cfg = self.config
        if heldout is not None:
            costs["heldout_ppl"] = heldout
        elif windows is not None and cfg.heal is not None:
            from swapprune.edit.healing import heldout_perplexity  # imports torch

            costs["heldout_ppl"] = self.stage(
                f"held-out ppl {point}", heldout_perplexity, model, windows, cfg.heal.batch_size
            )
        e = cfg.eval
        if e is None or (e.at is not None and point not in e.at):
            return
        # An evaluation-only run evaluates the model it was given, not a "base" of anything.
        label = point if len(cfg.points()) > 1 else cfg.model.name
        res = self.stage(f"eval {label}", evaluate, cfg, model, tok)
        self.results[point] = res
        self.metrics["eval"][point] = {
            t: {m: {"value": v.value, "low": v.low, "high": v.high} for m, v in tr.metrics.items()}
            for t, tr in res.tasks.items()
        }
        ppl = res.tasks.get("swapprune_wikitext2_ppl")
        if ppl is not None:
            costs["wikitext2_ppl"] = ppl.metrics["perplexity"].value

    def provenance(self) -> dict:
        return {
            "command": self.command,
            "config": self.config.to_dict(),
            "calibration": self.metrics.get("calibration"),
            "scores_reused_from": self.metrics.get("scores_reused_from"),
            "heal": self.metrics.get("heal"),
        }

    def save_model(self, directory: Path, model, tok, plan, source, calibration, scores, patches):
        from swapprune.output.checkpoint import write_checkpoint  # imports torch

        x = self.config.export
        assert x is not None
        if patches:  # the matrices beside plan.json, their digest in it
            from swapprune.edit.patch import save_patches  # imports torch

            plan.patch["sha256"] = save_patches(patches, directory)
        ids = calibration.input_ids[:2] if calibration is not None else None
        dtype = resolve_dtype(x.save_dtype, "cpu") if x.save_dtype else None
        args = (self.config, directory, model, plan, ids)
        if writes_gguf(self.config):
            gguf = self.stage("save gguf", save_gguf, *args)
        else:
            gguf = save_gguf(*args)  # writes nothing: the reason, when the input is a GGUF
        if gguf is not None:
            self.metrics["gguf"] = gguf
        record = {k: self.metrics[k] for k in ("cost", "stability", "gguf") if k in self.metrics}
        record |= plan.records.to_dict("certificate", "compute")
        serving = ServingReport(model.config, plan, gguf)
        self.metrics["selfcheck"] = write_checkpoint(
            model,
            tok,
            plan,
            directory,
            save_dtype=dtype,
            provenance=self.provenance(),
            base_model_id=source,
            selfcheck=x.selfcheck,
            check_ids=ids,
            card_extra=card_lines(self.metrics, plan),
            record=record,
            card_from_files=serving.card_lines,
        )
        self.metrics["serving"] = serving.to_dict()
        return self.metrics["selfcheck"]

    def save_quantized(self, directory: Path, model, tok, plan, calibration):
        from swapprune.edit.quantization import save_quantized  # imports torch

        assert self.config.quantize is not None
        ids = calibration.input_ids[:2] if calibration is not None else None
        prov = {"command": self.command, "config": self.config.to_dict(), "plan": plan.describe()}
        self.metrics["quantize"]["selfcheck"] = save_quantized(
            model,
            tok,
            directory / "quantized",
            config=self.config.quantize,
            provenance=prov,
            check_ids=ids,
            describe=plan.describe(),
            final_path="quantized",
        )

    def finish(self, directory: Path, plan, scores) -> None:
        self.metrics.update(plan=plan.describe(), versions=versions())
        # Points and evaluations that measured nothing leave no empty record behind.
        for key in ("costs", "eval"):
            kept = {k: v for k, v in self.metrics.get(key, {}).items() if v}
            if kept:
                self.metrics[key] = kept
            else:
                self.metrics.pop(key, None)
        write_text_atomic(directory / "config.yaml", self.config.to_yaml())
        if scores is not None:
            scores.save(directory / "scores.json")
        write_json_atomic(directory / "metrics.json", self.metrics, indent=2)
        for point, res in self.results.items():
            (directory / "eval").mkdir(exist_ok=True)
            write_text_atomic(directory / "eval" / f"{point}.json", res.to_json(indent=1))


def _summary(name: str, out) -> str:
    if name == "select" and isinstance(out, tuple) and hasattr(out[0], "describe"):
        return f": {out[0].describe()}"
    if name == "cost" and hasattr(out, "summary"):
        return f": {out.summary().removeprefix('cost: ')}"
    if name.startswith("held-out") and isinstance(out, float):
        return f": {out:.3f}"
    if name.startswith("eval ") and hasattr(out, "tasks"):
        # Each with the units it was measured on: a perplexity differs with its windows.
        first = {t: next(iter(tr.metrics.items()), None) for t, tr in out.tasks.items()}
        return ": " + ", ".join(
            f"{t} {m[0]} {m[1].value:.4g} ({len(out.tasks[t].unit_ids)} {out.tasks[t].unit}s)"
            for t, m in first.items()
            if m
        )
    return ""
