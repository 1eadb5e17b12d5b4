"""What each command prints when it is done: the result a person reads, and the next command."""

from __future__ import annotations

import shlex

from swapprune.cli import next_steps
from swapprune.engine.estimate import duration
from swapprune.evaluation import compare
from swapprune.evaluation.names import WIKITEXT2_PPL
from swapprune.records import CertificateSkipped
from swapprune.serving.report import summary_lines


def _q(path) -> str:
    return shlex.quote(str(path))


def _regime_line(summary: dict) -> str | None:
    reg = summary.get("regime")
    if not reg:
        return None
    conf = reg.get("confidence")
    conf_text = f", confidence {conf:.2f}" if isinstance(conf, (int, float)) else ""
    ir = reg.get("median_ir")
    return (
        f"regime: {reg['call']} (median adjacent d_repl {reg['median_replacement']:.3g}, "
        f"d_inter {reg['median_interchange']:.3g}, I/R "
        f"{ir:.2f}{conf_text}): {reg['advice']}"
        if ir is not None
        else f"regime: {reg['call']}: {reg['advice']}"
    )


def print_prune_summary(res) -> None:
    """The cut, what it cost and how far to trust it, the checkpoint, and one ``next:``."""
    for line in [*cut_lines(res), *checkpoint_lines(res)]:
        print(line)
    print(f"checkpoint: {res.output}")
    print(f"next: {next_steps.advice(res)}")


def cut_lines(res) -> list[str]:
    """The cut and its records (``auto``'s decision or the regime, adaptive calibration, the
    certificate, stability, compute), then its cost with CIs and the cost warning."""
    plan = res.plan
    done = "merged" if plan.op == "merge" else "removed"
    blocks = plan.merged if plan.op == "merge" else plan.removed
    out = [
        f"{done} blocks {blocks} of {plan.num_layers} by {plan.protocol}/{plan.strategy}; "
        f"kept {len(plan.kept)}"
    ]
    records = plan.records
    if records.auto is not None:
        out += records.auto.lines()
    elif res.scores is not None and res.scores.pairs:
        regime = _regime_line(res.scores.to_dict()["summary"])
        if regime:
            out.append(regime)
    adaptive = records.tranches
    if adaptive is not None:
        out.append(adaptive.summary())
        if adaptive.stop_note:
            out.append(f"  note: {adaptive.stop_note}")
    cert = records.certificate
    if isinstance(cert, CertificateSkipped):
        out.append(f"certificate: not measured ({cert.reason})")
    elif cert is not None:
        out.append(cert.summary())
    if records.stability is not None:
        out.append(records.stability.summary())
        warning = records.stability_warning()
        if warning:
            out.append(warning)
    if records.compute is not None:
        out.append(records.compute.summary())
    cost = res.metrics.get("cost")
    if cost:
        out += cost["summary"].splitlines()
        if cost.get("warning"):
            out.append(cost["warning"])
    return out


def checkpoint_lines(res) -> list[str]:
    """The self-check, the serving lines (``--serve``, ``model.gguf``) and the time taken."""
    out = []
    sc = res.metrics.get("selfcheck") or {}
    if sc.get("skipped"):
        out.append("self-check: skipped")
    elif sc:
        out.append(
            f"self-check: reload logits max diff {sc.get('logits_max_abs_diff', 'n/a'):.3g}, "
            f"generation with KV cache == without: {sc.get('generate_cache_equal')} "
            f"({sc.get('wall_s', 0):.1f}s)"
        )
    out += summary_lines(res.metrics, res.plan)  # the --serve constraint, model.gguf, serving
    estimate = (res.metrics.get("estimate") or {}).get("prune")
    if estimate and "seconds" in estimate:
        out.append(time_line(res.metrics, estimate))
    return out


def print_score_summary(res, resumed: bool, top: int = 5) -> None:
    d = res.scores.to_dict()
    t = d.get("timing", {})
    cal = d.get("calibration", {})
    where = f" (resumed from {res.output})" if resumed else ""
    n_pairs, n_layers = len(d["pairs"]), len(d["deletion"])
    what = f"{n_pairs} pairs" + (f" and {n_layers} deletions" if n_layers else "")
    print(
        f"scored {what}{where} on {cal.get('prompts')} windows x {cal.get('tokens')} tokens "
        f"({d.get('positions')} positions) in {t.get('seconds', 0):.1f}s, "
        f"{t.get('block_evals', 0)} block evaluations"
    )
    rows = {(r["i"], r["j"]): r for r in d["pairs"]}
    for proto, ranked in d["summary"].get("ranking", {}).items():
        print(f"most swap-similar pairs by {proto} (KL nats, 95% CI; rank CI over resamples):")
        for r in ranked[:top]:
            lo, hi = rows[(r["i"], r["j"])][proto]["ci"]
            print(
                f"  {r['rank']:>2}. blocks {r['i']}-{r['j']}  {r['distance']:.4g} "
                f"[{lo:.4g}, {hi:.4g}]  rank {r['rank_ci'][0]}-{r['rank_ci'][1]}"
            )
    line = _regime_line(d["summary"])
    if line:
        print(line)
    print(f"wrote {res.output}")
    print(f"next: {next_steps.prune_from_scores(res.config, res.output, res.scores)}")


def print_eval_summary(res, baseline=None, baseline_given: bool = False) -> None:
    result = res.eval.get("base")
    for name, t in result.tasks.items():
        n = len(t.unit_ids)
        for metric, m in t.metrics.items():
            ci = f" [{m.low:.4g}, {m.high:.4g}]" if m.low is not None else ""
            line = f"{name} {metric}: {m.value:.4g}{ci} (n={n} {t.unit}s)"
            if (
                baseline is not None
                and name in baseline.tasks
                and metric in baseline.tasks[name].metrics
            ):
                b = baseline.tasks[name].metrics[metric].value
                change = f"{(m.value / b - 1) * 100:+.1f}%" if b else "n/a"
                try:
                    names = ("the baseline", "this model")
                    verdict = both_sides(compare(baseline, result, name, metric, names=names)[1])
                except Exception as e:  # units that do not pair (another limit or tokenizer)
                    verdict = f"not paired: {e}"
                line += f"; vs baseline {b:.4g}: {change} ({verdict})"
            print(line)
    print(f"wrote {res.output}")
    step = next_steps.eval_next(
        getattr(res, "config", None), baseline_given or baseline is not None
    )
    if step:
        print(f"next: {step}")
    elif baseline is None:
        print(f"to compare a pruned model against this one: --baseline {_q(res.output)}")


def both_sides(verdict) -> str:
    """A verdict's label with the loser named too: ``"this model better than the baseline"``."""
    label = verdict.label
    if verdict.outcome in ("a_better", "b_better"):
        loser = verdict.b if verdict.outcome == "a_better" else verdict.a
        label = label.replace(" better", f" better than {loser}", 1)
    return label


def print_run_summary(res, write: next_steps.Write | None = None) -> None:
    """A recipe's summary: a cut is said as the prune command says it (the certificate, the
    CIs, one ``next:``, written by ``write``), then each point's costs and the recovery."""
    m = res.metrics
    cutting = res.plan is not None and res.config.prune is not None
    if cutting:
        for line in cut_lines(res):
            print(line)
    elif res.plan is not None:
        print(f"plan: {res.plan.describe()}")
    for point, costs in m.get("costs", {}).items():
        if costs:
            print(f"{point}: " + ", ".join(_point_cost(res, point, k, v) for k, v in costs.items()))
    rec = m.get("recovery") or {}
    if rec.get("primary"):
        f = rec[rec["primary"]]["fraction"]
        print(f"recovered fraction ({rec['primary']}): " + (f"{f:.3f}" if f is not None else "n/a"))
    if cutting:
        for line in checkpoint_lines(res):
            print(line)
    if res.output is not None:
        print(f"run directory: {res.output}")
    if cutting and res.output is not None:
        print(f"next: {next_steps.advice(res) if write is None else next_steps.advice(res, write)}")


def _point_cost(res, point: str, metric: str, value: float) -> str:
    """``wikitext2_ppl 25.5 (23 windows)``: a perplexity with the windows it was measured on,
    which differ between commands (the cost check's first windows, the whole contract)."""
    windows = None
    if metric == "heldout_ppl" and res.config.heal is not None:
        windows = res.config.heal.heldout
    elif metric == "wikitext2_ppl":
        result = res.eval.get(point)
        task = result.tasks.get(WIKITEXT2_PPL) if result is not None else None
        windows = len(task.unit_ids) if task is not None else None
    return f"{metric} {value:.4g}" + (f" ({windows} windows)" if windows else "")


def time_line(metrics: dict, estimate: dict) -> str:
    """The time the run took, beside what was estimated before it started."""
    wall = metrics.get("wall_s", {})
    counted = {k: v for k, v in wall.items() if k in ESTIMATED}
    said = f"~{duration(estimate['seconds'])}"
    if "at_most_s" in estimate:
        said += f", at most ~{duration(estimate['at_most_s'])}"
    return (
        f"time: {duration(metrics.get('total_s', 0.0))} in all; {', '.join(counted)} took "
        f"{duration(sum(counted.values()))}, estimated {said} before the run"
    )


#: The stages the estimate before a prune run covers.
ESTIMATED = ("held-out windows", "select", "patch", "cost")
