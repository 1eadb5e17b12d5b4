"""Run a validated :class:`~swapprune.recipe.Recipe`: every stage in order, in one screen.

load -> (budget check) -> calibrate -> score -> select -> edit -> heal -> export
-> quantize -> export quantized, with evaluation at each point the recipe asks
for. The run directory (``export.output``) is built in a hidden sibling and
renamed into place at the end, so a failed run leaves no directory that looks
whole. It holds ``recipe.yaml`` (resolved), ``plan.json``, ``metrics.json``
(costs at each point, heal/quantize reports, recovered fraction, versions,
timings), ``eval/<point>.json``, ``scores.json`` (score stage), ``model/``
(:func:`swapprune.checkpoint.save_checkpoint`, before quantization) and
``quantized/`` (quanto format, see :mod:`swapprune.quantization`).
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from swapprune.recipe import Recipe


def run_recipe(recipe: Recipe, progress=print, command: list[str] | None = None) -> dict:
    """Run ``recipe``; progress lines go to ``progress`` (``None``: silent).

    Returns:
        ``{"metrics": dict (as in metrics.json), "output": run dir or None, "plan": PrunePlan,
        "model": the final model, "tokenizer", "eval": point -> EvalResult}``.
    """
    from swapprune.architectures import decoder_stack
    from swapprune.surgery import apply_plan

    r, run = recipe, Run(recipe, progress, command)
    try:
        request = r.prune.request(r.calibration.seed) if r.prune else None
        run.check_layers(config_layers(r), request)  # before the weights load, when possible
        model, tok, source = run.stage("load", load, r)
        run.check_layers(decoder_stack(model).num_layers, request)  # before any forward pass
        windows = run.stage("heal windows", heal_windows, r, model, tok) if r.heal else None
        teacher = copy.deepcopy(model).eval() if r.heal and r.heal.distill else None
        run.measure("base", model, tok, windows)
        calibration = run.stage("calibrate", calibrate, r, model, tok) if r.score or r.prune else None
        scores = run.stage("score", score, r, model, source, calibration) if r.score else None
        run.keep(calibration, scores)
        plan = run.stage("select", select, r, request, model, tok, source, calibration, scores)
        if r.prune:
            run.stage("edit", apply_plan, model, plan)
            run.measure("pruned", model, tok, None if r.heal else windows)  # heal measures it
        if r.heal:
            model, report = run.stage("heal", heal, r, model, tok, plan, teacher, windows,
                                      run.say)
            del teacher
            run.metrics["heal"] = report.to_dict()
            if r.prune:
                run.metrics["costs"]["pruned"]["heldout_ppl"] = report.heldout_ppl_before
            run.measure("healed", model, tok, None, heldout=report.heldout_ppl_after)
            run.metrics["recovery"] = recovery(run.metrics["costs"])
        if r.export:
            run.stage("export", run.save_model, model, tok, plan, source, calibration)
        if r.quantize:
            from swapprune.quantization import quantize_model

            run.metrics["quantize"] = run.stage("quantize", quantize_model, model, r.quantize).to_dict()
            run.measure("quantized", model, tok, windows)
            if r.export:
                run.stage("export quantized", run.save_quantized, model, tok, plan, calibration)
        return run.finish(plan, model, tok)
    except BaseException:
        run.discard()
        raise


# -- stages ---------------------------------------------------------------------------------


def config_layers(r: Recipe) -> int | None:
    """Block count from the model's config alone (``None`` if it cannot be read cheaply)."""
    from transformers import AutoConfig

    from swapprune.architectures import ARCHITECTURES, _count_key
    from swapprune.loading import resolve_source

    src = resolve_source(r.model.spec)
    kwargs = {"gguf_file": src.gguf_file} if src.gguf_file else {}
    try:
        cfg = AutoConfig.from_pretrained(src.path, trust_remote_code=r.model.trust_remote_code,
                                         **kwargs)
        spec = ARCHITECTURES.get(cfg.model_type)
        return int(getattr(cfg, spec.count_key if spec else _count_key(cfg)))
    except Exception:  # offline hub id, remote code, odd config: checked after load instead
        return None


def load(r: Recipe):
    from swapprune.loading import load_model

    m = r.model
    return load_model(m.spec, dtype=m.dtype, device=m.device, device_map=m.device_map,
                      trust_remote_code=m.trust_remote_code)


def heal_windows(r: Recipe, model, tok):
    from swapprune.healing import heal_windows as cut

    return cut(tok, r.heal, getattr(model.config, "max_position_embeddings", None))


def calibrate(r: Recipe, model, tok):
    from swapprune.calibration import load_calibration

    c = r.calibration
    ctx = getattr(model.config, "max_position_embeddings", None)
    return load_calibration(tok, c.calib, c.prompts, c.tokens, c.seed, ctx)


def score(r: Recipe, model, source, calibration):
    from swapprune.engine.scoring import score as probe

    s, c = r.score, r.calibration
    return probe(model, calibration=calibration, protocols=s.protocols, pairs=s.pairs,
                 positions=c.positions, batch_size=c.batch_size, cache_gb=s.cache_gb,
                 n_boot=s.bootstrap, seed=c.seed, model_id=source.id, progress=False)


def select(r: Recipe, request, model, tok, source, calibration, scores):
    """The plan: chosen by the prune stage, or the identity plan when there is none."""
    from swapprune.architectures import decoder_stack
    from swapprune.engine.scores import ScoreResult
    from swapprune.plan import PrunePlan
    from swapprune.pruning import plan_pruning

    if request is None:
        return PrunePlan.from_removal(decoder_stack(model).num_layers, [], model=source.id)
    if r.prune.scores:
        scores = ScoreResult.load(r.prune.scores)
    c = r.calibration
    plan, _ = plan_pruning(model, tok, request, scores=scores, calibration=calibration,
                           positions=c.positions, batch_size=c.batch_size, model_id=source.id,
                           progress=False)
    return plan


def heal(r: Recipe, model, tok, plan, teacher, windows, say):
    from swapprune.healing import heal as train

    return train(model, tok, r.heal, plan=plan, teacher=teacher, windows=windows,
                 progress=lambda s: say(f"  {s}"))


def recovery(costs: dict) -> dict:
    """Recovered fraction ``(pruned - healed) / (pruned - base)`` for each cost measured."""
    out = {}
    for metric in costs.get("healed", {}):
        base, pruned, healed = (costs.get(p, {}).get(metric) for p in ("base", "pruned", "healed"))
        if None in (base, pruned, healed):
            continue
        gap = pruned - base
        out[metric] = {"base": base, "pruned": pruned, "healed": healed,
                       "fraction": (pruned - healed) / gap if gap > 0 else None}
    # Evaluation's WikiText-2 test perplexity is held out from all calibration text.
    out["primary"] = next((m for m in ("wikitext2_ppl", "heldout_ppl") if m in out), None)
    return out


# -- bookkeeping ----------------------------------------------------------------------------


class Run:
    """Timings, metrics, evaluation at each point, and the run directory being built."""

    def __init__(self, recipe: Recipe, progress, command):
        self.recipe, self.say = recipe, progress or (lambda s: None)
        self.command = command if command is not None else list(sys.argv)
        self.metrics: dict = {"costs": {}, "eval": {}, "wall_s": {}}
        self.results: dict = {}  # point -> EvalResult
        self.tmp: Path | None = None
        self.scores = None
        self.start = time.perf_counter()
        if recipe.export:
            from swapprune.artifacts import check_output_dir

            self.out = check_output_dir(recipe.export.output, recipe.export.overwrite)

    def stage(self, name: str, fn, *args):
        t0 = time.perf_counter()
        self.say(f"[{name}] ...")
        out = fn(*args)
        dt = time.perf_counter() - t0
        self.metrics["wall_s"][name] = round(dt, 2)
        self.say(f"[{name}] done in {dt:.1f}s" + _summary(name, out))
        return out

    def keep(self, calibration, scores) -> None:
        self.scores = scores
        if calibration is not None:
            self.metrics["calibration"] = calibration.describe()

    def check_layers(self, num_layers: int | None, request) -> None:
        if num_layers is None:
            return
        self.metrics["num_layers"] = num_layers
        if request is not None:
            request.validate(num_layers)
        if self.recipe.score:
            from swapprune.engine.plans import parse_pairs

            parse_pairs(self.recipe.score.pairs, num_layers)

    def measure(self, point: str, model, tok, windows, heldout: float | None = None) -> None:
        """Costs at ``point``: held-out heal windows (if healing) and the eval tasks (if asked)."""
        costs = self.metrics["costs"].setdefault(point, {})
        if heldout is not None:
            costs["heldout_ppl"] = heldout
        elif windows is not None:
            from swapprune.healing import heldout_perplexity

            costs["heldout_ppl"] = self.stage(f"held-out ppl {point}", heldout_perplexity,
                                              model, windows, self.recipe.heal.batch_size)
        e = self.recipe.eval
        if e is None or (e.at is not None and point not in e.at):
            return
        from swapprune.evaluation import evaluate

        res = self.stage(f"eval {point}", evaluate, model, tok, e.tasks, e.limit, e.words,
                         e.max_length, e.batch_size, e.bootstrap)
        self.results[point] = res
        self.metrics["eval"][point] = {
            t: {m: {"value": v.value, "low": v.low, "high": v.high} for m, v in tr.metrics.items()}
            for t, tr in res.tasks.items()}
        ppl = res.tasks.get("swapprune_wikitext2_ppl")
        if ppl is not None:
            costs["wikitext2_ppl"] = ppl.metrics["perplexity"].value

    def workdir(self) -> Path:
        if self.tmp is None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.partial-", dir=self.out.parent))
        return self.tmp

    def save_model(self, model, tok, plan, source, calibration):
        from swapprune.checkpoint import save_checkpoint
        from swapprune.pipeline import save_dtype

        x = self.recipe.export
        prov = {"command": self.command, "recipe": self.recipe.to_dict(),
                "calibration": calibration.describe() if calibration is not None else None,
                "heal": self.metrics.get("heal")}
        ids = calibration.input_ids[:2] if calibration is not None else None
        self.metrics["selfcheck"] = save_checkpoint(
            model, tok, plan, self.workdir() / "model", save_dtype=save_dtype(x.save_dtype),
            provenance=prov, base_model_id=source.id, selfcheck=x.selfcheck, check_ids=ids)

    def save_quantized(self, model, tok, plan, calibration):
        from swapprune.quantization import save_quantized

        ids = calibration.input_ids[:2] if calibration is not None else None
        prov = {"command": self.command, "recipe": self.recipe.to_dict(), "plan": plan.describe()}
        self.metrics["quantize"]["selfcheck"] = save_quantized(
            model, tok, self.workdir() / "quantized", config=self.recipe.quantize,
            provenance=prov, check_ids=ids, describe=plan.describe(),
            final_path=str(self.out / "quantized"))

    def finish(self, plan, model, tok) -> dict:
        self.metrics.update(plan=plan.describe(), versions=versions(),
                            total_s=round(time.perf_counter() - self.start, 2))
        if self.recipe.export:
            from swapprune.artifacts import apply_umask as _apply_umask
            from swapprune.artifacts import move_into_place as _move_into_place

            d = self.workdir()
            (d / "recipe.yaml").write_text(self.recipe.to_yaml())
            plan.to_json(d / "plan.json")
            if self.scores is not None:
                self.scores.save(d / "scores.json")
            (d / "metrics.json").write_text(json.dumps(self.metrics, indent=2, default=str) + "\n")
            for point, res in self.results.items():
                (d / "eval").mkdir(exist_ok=True)
                (d / "eval" / f"{point}.json").write_text(res.to_json(indent=1))
            _apply_umask(d)
            _move_into_place(d, self.out)
            self.tmp = None
            self.say(f"[done] run directory: {self.out}")
        return {"metrics": self.metrics, "output": str(self.out) if self.recipe.export else None,
                "plan": plan, "model": model, "tokenizer": tok, "eval": self.results}

    def discard(self) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def _summary(name: str, out) -> str:
    if hasattr(out, "describe") and callable(out.describe) and name == "select":
        return f": {out.describe()}"
    if name.startswith("held-out") and isinstance(out, float):
        return f": {out:.3f}"
    if name.startswith("eval ") and hasattr(out, "tasks"):
        first = {t: next(iter(tr.metrics.items()), None) for t, tr in out.tasks.items()}
        return ": " + ", ".join(f"{t} {m[0]} {m[1].value:.4g}" for t, m in first.items() if m)
    return ""


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    from swapprune.artifacts import versions as _versions

    v = _versions()
    for dist in ("peft", "optimum-quanto", "accelerate"):
        try:
            v[dist] = version(dist)
        except PackageNotFoundError:
            v[dist] = None
    return v
