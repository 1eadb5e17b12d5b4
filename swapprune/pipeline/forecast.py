"""What a run will do and how long it should take on this machine, said before it starts.

Every command that scores prints this first: the pieces of work its
configuration implies (probes, the tranche schedule's first look, the
certificate's held-out evaluations, the patch fit, the cost check), each counted
by :mod:`swapprune.engine.estimate`, and their time from one timed base pass on
the run's own windows (:func:`~swapprune.engine.estimate.measure_rates`). Above
:data:`QUICK_ABOVE_S` on a CPU it also names the quick path and what that would
take, from the same timing.

Counts are exact for probes and plain passes; evaluations of pruned models (the
certificate, ``auto``'s beam) are upper bounds ("at most"), since which sets get
evaluated is decided on the way. Loading, saving and the self-check are not
counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from swapprune.config import quick_of
from swapprune.engine import threads
from swapprune.engine.estimate import (
    Rates,
    Work,
    duration,
    measure_rates,
    pass_work,
    probe_work,
    set_work,
)
from swapprune.engine.orders import parse_pairs
from swapprune.errors import SwappruneError
from swapprune.evaluation import contract
from swapprune.evaluation.generative import N_PROMPTS, NEW_TOKENS, PROMPT_TOKENS
from swapprune.evaluation.names import WIKITEXT2_PPL
from swapprune.evaluation.perplexity import TEST_TEXT, first_words, sliding_windows, tokenize
from swapprune.pipeline.checks import check_model, heldout_tokens
from swapprune.select.auto import default_cap
from swapprune.select.criteria import SWAP
from swapprune.select.reference import (
    CARRIED_TYPICAL,
    NEIGHBOURS,
    SCREEN_WINDOWS,
    patch_screen_windows,
)

if TYPE_CHECKING:
    from swapprune.config import RunConfig

#: Runs forecast above this many seconds on a CPU name the quick path.
QUICK_ABOVE_S = 180.0
#: Tokens of a window of the matched contract (the cost check, wikitext2_ppl).
CONTRACT_TOKENS = 512


@dataclass(frozen=True)
class Part:
    """One piece of a run's work: ``what`` it is, its compute, and whether that is a bound."""

    what: str
    work: Work
    bound: bool = False
    ranking: bool = False  # a ranking-only pass (bfloat16 where fast)


@dataclass
class Forecast:
    """The work of a run, split into what it surely does and what it may do after.

    Attributes:
        headline: one phrase: what the run will do.
        parts: work the run does (for tranches: through the first look).
        later: work it may do after that (further looks, ``auto``'s beam), at most.
        notes: work that is not counted, in words.
        rates: the timing, or ``None`` for runs too small to be worth timing.
        quick: the same forecast at the ``--quick`` settings, when that is named.
        quick_flag: how the quick path is asked for on this command.
    """

    headline: str
    parts: list[Part] = field(default_factory=list)
    later: list[Part] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rates: Rates | None = None
    quick: Forecast | None = None
    quick_flag: str = "--quick"
    windows: str = ""

    @property
    def work(self) -> Work:
        out = Work()
        for p in self.parts:
            out += p.work
        return out

    def seconds(self, parts: list[Part] | None = None) -> float:
        assert self.rates is not None
        r = self.rates
        return sum(r.seconds(p.work, p.ranking) for p in (self.parts if parts is None else parts))

    def most_seconds(self) -> float:
        """The time if everything it may do is done (every look, ``auto``'s beam)."""
        return self.seconds() + self.seconds(self.later)

    def lines(self, threads: str = "") -> list[str]:
        """The lines printed before the run (``[estimate] ...``)."""
        r = self.rates
        pieces = []
        for k, p in enumerate(self.parts):
            n = f"{'at most ' if p.bound else ''}{p.work.block_evals}"
            n += " block evaluations" if k == 0 else ""
            took = f" (~{duration(r.seconds(p.work, p.ranking))})" if r else ""
            pieces.append(f"{p.what} {n}{took}")
        out = [f"[estimate] {self.headline}"]
        if r is None:
            out.append(f"[estimate] {', '.join(pieces)}")
        else:
            first = " if the first look is enough" if self.later else ""
            out.append(f"[estimate] ~{duration(self.seconds())}{first}: {', '.join(pieces)}")
            if self.later:
                later = ", ".join(
                    f"{p.what} ~{duration(r.seconds(p.work, p.ranking))}" for p in self.later
                )
                most = duration(self.most_seconds())
                out.append(f"[estimate] if needed after that: {later}; at most ~{most} in all")
            out.append(
                f"[estimate] measured here: {r.block_ms():.0f} ms per block on {r.shape[0]} x "
                f"{r.shape[1]} tokens at {threads or f'{r.threads} torch threads'}"
                + (f" (in bfloat16 for the screens: {r.ranking:.2f}x)" if r.ranking < 1 else "")
                + "; loading, saving and the self-check not counted"
            )
        out += [f"[estimate] not counted: {n}" for n in self.notes]
        if self.quick is not None and self.quick.rates is not None:
            q = self.quick
            took = f"~{duration(q.seconds())}"
            if duration(q.most_seconds()) != duration(q.seconds()):
                took += f", at most ~{duration(q.most_seconds())}"
            out.append(
                f"[estimate] that may take more than {duration(QUICK_ABOVE_S)} on a CPU; for a "
                f"first look, {self.quick_flag} ({q.windows}) takes {took}"
            )
        return out


# -- the pieces ----------------------------------------------------------------------------


def _pairs(num_layers: int) -> list[tuple[int, int]]:
    return [(i, i + 1) for i in range(num_layers - 1)]


def selection(
    cfg: RunConfig, facts, spec, scores_given: bool, base_cached: bool = False
) -> Forecast:
    """The selection of ``cfg.prune`` (probes or tranches, tie-break, certificate), then the
    patch fit and the cost check (``base_cached``: its base side read from the cache)."""
    p, c = cfg.prune, cfg.calibration
    assert p is not None
    L, n, bs = facts.num_layers, spec.budget, c.batch_size
    crit, probes = spec.criterion, spec.probes
    h, t = p.heldout_prompts, heldout_tokens(p, facts.context_length)
    parts: list[Part] = []
    later: list[Part] = []
    notes: list[str] = []
    pairs = f"{'/'.join(probes)} probes of {L - 1} adjacent pairs"
    what = f"{spec.name}, {n} of {L} blocks: "
    tranches = spec.policy in ("adaptive", "auto") and not scores_given
    if scores_given:
        what += f"probes reused from {p.scores or 'the scores given'}"
    elif tranches:
        a = spec.adaptive
        looks = a.max_windows // a.tranche
        stop = f"certified on {h} held-out windows x {t} tokens" if spec.certify else "stable"
        what += (
            f"{pairs} in tranches of {a.tranche} windows x {c.tokens} tokens (up to "
            f"{a.max_windows}) until the cut is {stop}"
        )
        look = probe_work(L, _pairs(L), probes, a.tranche, c.tokens, bs, c.positions)
        parts.append(Part("probes", look))
        if crit.tiebreak == "residual" or spec.policy == "auto":
            parts.append(Part("tiebreak passes", pass_work(L, a.tranche, c.tokens, bs, head=False)))
        if looks > 1:
            if spec.certify:  # a later look evaluates only the sets it has not seen
                look += set_work(L, n, spec.certify_sets, h, t, bs) - pass_work(
                    L, h, t, bs, head=False
                )
            more = f"{looks - 1} more look{'s' if looks > 2 else ''}"
            later.append(Part(more, look.times(looks - 1), bound=True))
    elif probes:
        what += f"{pairs} on {c.prompts} windows x {c.tokens} tokens"
        parts.append(
            Part("probes", probe_work(L, _pairs(L), probes, c.prompts, c.tokens, bs, c.positions))
        )
    else:
        what += f"ranked by {crit.name} on {c.prompts} windows x {c.tokens} tokens"
    if crit.needs_model or spec.strategy.queries_model or not probes:
        notes.append(f"the passes of {crit.name}/{spec.strategy.name} over the calibration windows")
    if spec.certify:
        if not tranches:
            what += f"; certified on {h} held-out windows x {t} tokens"
        # the plausible sets, BI's set, the other protocol's, the neighbours: all screened;
        # the chosen set, the unpruned model and CARRIED_TYPICAL others go on to every window
        others = spec.certify_sets + (len(spec.probes) > 1) + NEIGHBOURS
        sets = 2 + min(CARRIED_TYPICAL, others)
        parts.append(Part("certificate", set_work(L, n, sets, h, t, bs)))
        if others > CARRIED_TYPICAL:
            further = set_work(L, n, others - CARRIED_TYPICAL, h, t, bs)
            later.append(Part("the screen's further sets", further, bound=True))
        # BI's pass over the calibration windows; every set screened on two windows
        screen = set_work(L, n, 2 * n + spec.certify_sets + 2, SCREEN_WINDOWS, t, bs)
        parts.append(Part("reference", pass_work(L, c.prompts, c.tokens, bs, head=False)))
        parts.append(Part("screen", screen, bound=True, ranking=True))
    if spec.policy == "auto":
        cap = min(default_cap(n, spec.constraints), spec.max_oracle_calls)
        later.append(
            Part(f"the beam if both-high ({cap} calls)", set_work(L, n, cap, h, t, bs), True)
        )
    if p.patch != "none":
        ctx = facts.context_length
        tp = p.patch_tokens if ctx is None else min(p.patch_tokens, ctx)
        fit = pass_work(L, p.patch_prompts, tp, bs, head=False)
        one_fit = pass_work(L - n, p.patch_prompts, tp, bs, head=False)
        if p.patch_aware:
            _patch_aware(parts, later, facts, spec, p.patch_prompts, tp, bs, fit, one_fit)
            what += f"; every set compared after its own linear patch ({p.patch_prompts} x {tp})"
        else:
            parts.append(Part("patch fit", fit + one_fit))
            what += f"; a linear patch fitted on {p.patch_prompts} windows x {tp} tokens"
    if cfg.cost is not None:
        part = cost_check_part(cfg, facts, n, base_cached=base_cached)
        parts.append(part)
        what += f"; then the {part.what}"
    return Forecast(what, parts, later, notes, windows=f"{c.prompts} x {c.tokens} windows")


def _patch_aware(parts, later, facts, spec, windows: int, tokens: int, bs: int, capture, one_fit):
    """The fits of patch-aware selection: each screened set on the first few patch windows,
    each finalist on all of them (the cut's own patch is the certificate's fit, reused),
    and ``auto``'s beam on the few."""
    L, n = facts.num_layers, spec.budget
    hidden = int(getattr(facts, "hidden_size", 0) or 0)
    k = patch_screen_windows(windows, tokens, hidden, True) if hidden else windows
    small = pass_work(L - n, k, tokens, bs, head=False)
    finalists = 2 + CARRIED_TYPICAL - 1  # the chosen set and the carried ones; not the base
    parts.append(Part("patch fits of the finalists", capture + one_fit.times(finalists)))
    screened = 2 * n + spec.certify_sets + 2
    head = pass_work(L, k, tokens, bs, head=False)
    parts.append(
        Part(f"patch fits on {k} windows for the screen", head + small.times(screened), True)
    )
    if spec.policy == "auto":
        cap = min(default_cap(n, spec.constraints), spec.max_oracle_calls)
        later.append(Part(f"the beam's patch fits ({cap})", small.times(cap), True))


def cost_check_part(
    cfg: RunConfig, facts, budget: int, windows: int | None = None, base_cached: bool = False
) -> Part:
    """Base and pruned perplexity on the first windows of the matched contract, and the
    greedy-continuation agreement; ``base_cached``: the base model's side is read from
    :mod:`~swapprune.evaluation.base_cache`, only the cut's is measured."""
    assert cfg.cost is not None
    w = windows or cfg.cost.windows or 25  # 0: the whole contract, ~25 windows of SmolLM2's
    t = (
        CONTRACT_TOKENS
        if facts.context_length is None
        else min(CONTRACT_TOKENS, facts.context_length)
    )
    L = facts.num_layers
    runs = 3 if cfg.prune is not None and cfg.prune.patch != "none" else 2
    work = pass_work(L - budget, w, t, 8).times(runs - 1)
    if not base_cached:
        work += pass_work(L, w, t, 8)
    what = f"cost check on {w} contract windows"
    if cfg.cost.generative:
        n, seq = N_PROMPTS, PROMPT_TOKENS + NEW_TOKENS
        heads = Work(0, 0, n * NEW_TOKENS)
        work += pass_work(L - budget, n, seq - 1, 8, head=False) + heads  # teacher-forced
        if not base_cached:  # the base's greedy continuations and its own choices
            work += (pass_work(L, n, seq, n, head=False) + heads).times(2)
        what += " and generation"
    if base_cached:
        what += " (the base model's side cached)"
    return Part(what, work)


def scoring(cfg: RunConfig, facts, done: set | None = None) -> Forecast:
    """``cfg.score``: its probes on the calibration windows (pairs already in the file skipped)."""
    s, c = cfg.score, cfg.calibration
    assert s is not None
    L = facts.num_layers
    pairs = parse_pairs(s.pairs, L) if s.pairs else []
    todo = [q for q in pairs if q not in (done or set())]
    what = f"{'/'.join(s.probes)} probes of {len(todo)} pairs on {c.prompts} windows x {c.tokens} tokens"
    if done:
        what += f" ({len(pairs) - len(todo)} pairs already in {s.output})"
    probes = [q for q in s.probes if q != "deletion" or not done]
    work = probe_work(L, todo, probes, c.prompts, c.tokens, c.batch_size, c.positions)
    return Forecast(what, [Part("probes", work)], windows=f"{c.prompts} x {c.tokens} windows")


def scored_pairs(path: str | None, probes) -> set:
    """Pairs an existing scores file already holds every probe of (a resumed run skips them)."""
    want = [p for p in probes if p != "deletion"]
    try:
        rows = json.loads(Path(path).read_text()).get("pairs", []) if path else []
        return {(r["i"], r["j"]) for r in rows if all(p in r for p in want)}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return set()


def of_scoring(cfg: RunConfig, facts) -> tuple[Forecast, Forecast]:
    """``cfg.score``'s forecast (pairs its output file holds already skipped), and its quick one."""
    assert cfg.score is not None
    done = scored_pairs(cfg.score.output, cfg.score.probes)
    return scoring(cfg, facts, done), scoring(quick_of(cfg), facts)


def quick_selection(cfg: RunConfig, facts, scores_given: bool) -> Forecast | None:
    """:func:`selection` at the ``--quick`` settings, or ``None`` when those do not apply."""
    quick = quick_of(cfg)
    try:
        return selection(quick, facts, check_model(quick, facts), scores_given)
    except SwappruneError:
        return None


def timed(forecast: Forecast, rates: Rates | None, cpu: bool, quick: Forecast | None = None):
    """Attach the timing, and the quick path when the run is long on a CPU."""
    forecast.rates = rates
    if rates is None or not cpu or quick is None:
        return forecast
    quick.rates = rates
    # Named on what the run may take (every look), the wait a user has to decide on.
    long = forecast.most_seconds() > QUICK_ABOVE_S
    if long and quick.most_seconds() < 0.7 * forecast.most_seconds():
        forecast.quick = quick
    return forecast


def worth_timing(work: Work, num_layers: int) -> bool:
    """Whether a run is long enough that one timed base pass is small next to it."""
    return work.block_evals > 4 * num_layers


def announce(forecast: Forecast, model, calibration, batch_size: int, say, quick=None, rates=None):
    """Time the run here (unless it is small, or ``rates`` are given), then say the forecast.

    Returns:
        The :class:`~swapprune.engine.estimate.Rates` used, for a later forecast of the run.
    """
    from swapprune.model.stack import decoder_stack  # imports torch

    L = decoder_stack(model).num_layers
    total = forecast.work
    for p in forecast.later:
        total += p.work
    if rates is None and calibration is not None and worth_timing(total, L):
        rates = measure_rates(model, calibration.input_ids, batch_size)
    cpu = next(model.parameters()).device.type == "cpu"
    timed(forecast, rates, cpu, quick)
    for line in forecast.lines(threads.describe(rates.threads) if rates else ""):
        say(line)
    return rates


def record(forecast: Forecast) -> dict:
    """The forecast as ``metrics.json`` keeps it, to set beside the time taken."""
    out: dict = {"plan": forecast.headline, "block_evals": forecast.work.block_evals}
    if forecast.rates is not None:
        out["seconds"] = round(forecast.seconds(), 1)
        if forecast.later:
            out["at_most_s"] = round(forecast.most_seconds(), 1)
        out["threads"] = forecast.rates.threads
        out["ranking_factor"] = round(forecast.rates.ranking, 3)
    return out


def contract_windows(tokenizer, words: int, max_length: int, limit: int | None = None) -> int:
    """Windows of the matched contract with this tokenizer (what wikitext2_ppl scores)."""
    ids = tokenize(tokenizer, first_words(TEST_TEXT.read_text(encoding="utf-8"), words))
    n = len(sliding_windows(len(ids), max_length, contract.stride(max_length)))
    return min(n, limit) if limit else n


def comparison(job, facts, tokenizer, probes, specs) -> Forecast:
    """``swapprune compare``: the shared probes, then one evaluation per model."""
    cmp, c, e = job.compare, job.run.calibration, job.eval
    L = facts.num_layers
    methods = sorted({label for label, _ in specs})
    parts: list[Part] = []
    what = f"{len(methods)} methods x budgets {','.join(map(str, cmp.budgets))}"
    if cmp.scores:
        what += f"; probes reused from {cmp.scores}"
    else:
        pairs = parse_pairs(cmp.pairs, L)
        work = probe_work(L, pairs, probes, c.prompts, c.tokens, c.batch_size, c.positions)
        parts.append(Part("probes", work))
        what += f"; {'/'.join(probes)} probes of {len(pairs)} pairs on {c.prompts} windows"
    cells = 1 + len(specs) * (1 + sum(k != "none" for k in cmp.patches))
    what += f"; {cells} evaluations of {', '.join(e.tasks)}"
    notes = []
    if WIKITEXT2_PPL in e.tasks:
        w = contract_windows(tokenizer, e.words, e.max_length, e.limit)
        evals = pass_work(L, w, e.max_length, e.batch_size)
        for _, budget in specs:
            evals += pass_work(L - budget, w, e.max_length, e.batch_size)
        parts.append(Part(f"wikitext2_ppl ({w} windows each)", evals))
    others = [t for t in e.tasks if t != WIKITEXT2_PPL]
    if others:
        notes.append(f"the evaluations of {', '.join(others)}")
    queries = sorted(
        {
            s.name
            for s in specs.values()
            if s.strategy.queries_model or s.criterion.needs_model or s.policy == "auto"
        }
    )
    if queries:
        notes.append(f"the model queries of {', '.join(queries)}")
    notes.append(f"results already in {cmp.output}/cache are not computed again")
    return Forecast(what, parts, notes=notes, windows=f"{c.prompts} x {c.tokens} windows")


def validity(run, validate, facts, target_windows: int) -> Forecast:
    """``swapprune validate``: swap probes, then the cost of deleting each block alone."""
    c = run.calibration
    L, bs = facts.num_layers, c.batch_size
    probes = [p for p in SWAP if p in validate.criteria]
    parts = []
    if probes:
        work = probe_work(L, _pairs(L), probes, c.prompts, c.tokens, bs, c.positions)
        parts.append(Part("probes", work))
    parts.append(Part("deletions", _deletions(L, c.prompts, c.tokens, bs)))
    if validate.target != "calibration":
        tw = _deletions(L, target_windows, c.tokens, bs)
        parts.append(Part(f"deletions on {validate.target}", tw))
    what = (
        f"{len(validate.criteria)} criteria against the cost of deleting each of {L} blocks, "
        f"on {c.prompts} windows x {c.tokens} tokens"
    )
    notes = [n for n in ("taylor",) if n in validate.criteria]
    return Forecast(
        what,
        parts,
        notes=[f"the gradient passes of {n}" for n in notes],
        windows=f"{c.prompts} x {c.tokens} windows",
    )


def _deletions(num_layers: int, windows: int, tokens: int, batch_size: int) -> Work:
    """One capture, then each block deleted alone: the blocks after it re-run from the
    cached state, and the head at every position."""
    L = num_layers
    capture = pass_work(L, windows, tokens, batch_size, head=False)
    rerun = pass_work(sum(L - 1 - b for b in range(L)), windows, tokens, batch_size, head=False)
    return capture + rerun + Work(head_rows=L * windows * tokens)
