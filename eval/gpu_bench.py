"""GPU benchmark at the scale users prune: 8B-shaped random models, one CUDA device, one command.

    PYTHONPATH=. python3 eval/gpu_bench.py          # one H200: every section within --budget-s
    PYTHONPATH=. python3 eval/gpu_bench.py --tiny   # the same code path on a CPU, in seconds

Needs torch, transformers and numpy and this repository on ``PYTHONPATH``;
nothing is installed or downloaded, and none of gguf, lm-eval, optimum or
llm-compressor is imported. The models are random-weight Llama-3.1-8B and
Qwen3-8B shapes (``gpu_bench_models.py``), the windows random token ids.

Sections, each timed against the same-process naive run (``swapprune.engine.naive``:
one full forward of every modified model, logits at every position) and
against the hardware (block FLOP/s over ``--peak-tflops``):

``scan``
    both protocols, every adjacent pair, positions ``all``
    (``swapprune.engine.probing.score``), in bf16 (fast mode: the model in
    bf16) and in fp32 (exact mode).
``naive_scan``
    the literal definition on a stated subset of the pairs, scaled per pair:
    each pair costs the naive run the same three full forwards and KLs, so
    naive time = base forward + pairs x measured mean per pair. Its per-window
    values are compared with the scan's.
``sleb``, ``naive_sleb``
    SLEB-iterative to ``--sleb-n``; naively each oracle call is one full
    forward of the pruned model, measured on ``--naive-sleb-calls`` calls per
    step (on the fast selection's removal path) and scaled by the calls of that step.
``auto``
    ``--protocol auto`` to ``--auto-n`` on the bf16 scan's scores; its naive
    equivalent is the naive scan plus one naive forward per oracle call.
``spearman``
    the bf16 ranking of the adjacent pairs against the fp32 one (same weights:
    the bf16 model is the fp32 model rounded).

Every section also records ``torch.cuda.max_memory_allocated`` against the
model's parameter bytes. Sections run in a fixed priority order; one whose
estimate (from unit costs measured on the model) does not fit in what is left
of ``--budget-s`` (times ``--margin``) is skipped and named in the output, so
the run ends by about the budget. JSON goes to ``--json``, else ``$OUT/gpu_bench.json``, else
``eval/results/gpu_bench.json`` (``gpu_bench_tiny.json`` with ``--tiny``) and is
rewritten after every section, so a killed run keeps what it measured.
"""

from __future__ import annotations

import time

START = time.perf_counter()  # the budget counts from here, imports included

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from gpu_bench_models import (  # noqa: E402
    SHAPES,
    block_flops_per_token,
    build_model,
    head_flops_per_row,
    param_bytes,
    random_windows,
)

from swapprune.engine import naive  # noqa: E402
from swapprune.engine.orders import pair_probe_plans, parse_pairs  # noqa: E402
from swapprune.engine.probes import kl_rows  # noqa: E402
from swapprune.engine.probing import score  # noqa: E402
from swapprune.engine.runner import PlanRunner  # noqa: E402
from swapprune.model.stack import decoder_stack  # noqa: E402


# ----------------------------------------------------------------------------- selection adapter
# Every selection this bench makes (SLEB, auto) goes through select_blocks, which calls
# swapprune.plan_pruning (the CLI's select stage); auto_certificate reads the
# certificate auto records. A change of the selection API is handled here alone.
@dataclass
class Selected:
    """What a selection reports, in the form the bench reads.

    Attributes:
        removed: the removed blocks, sorted, 0-based.
        order: the removal order of an iterative selection (SLEB), else ``None``.
        first_costs: ``[L]`` the criterion's values before any removal (SLEB: calibration
            perplexity with each block removed alone), else ``None``.
        oracle_calls: pruned-model evaluations the selection asked for.
        record: the selection's own decision record (``auto``: regime, action, ...).
    """

    removed: list[int]
    order: list[int] | None
    first_costs: list[float] | None
    oracle_calls: int
    record: dict = field(default_factory=dict)


def select_blocks(
    model, windows: torch.Tensor, protocol: str, budget: int, *, batch_size: int, scores=None
) -> Selected:
    """Select ``budget`` blocks with ``protocol`` (``sleb``, ``auto``) on ``windows`` ``[N, T]``."""
    from swapprune.api import plan_pruning
    from swapprune.calibration.windows import Calibration
    from swapprune.select.reference import Heldout

    heldout = None
    if protocol == "auto":
        # auto searches and certifies on held-out windows: random windows of another seed,
        # an eighth as many as the scoring windows (at least 4) of the same length.
        n, t = max(4, windows.shape[0] // 8), windows.shape[1]
        vocab = int(model.get_output_embeddings().weight.shape[0])
        draw = [
            torch.randint(0, vocab, (n, t), generator=torch.Generator().manual_seed(s))
            for s in (1, 2)
        ]
        heldout = Heldout(Calibration(draw[0], "random-1", 1), Calibration(draw[1], "random-2", 2))
    plan, _ = plan_pruning(
        model,
        None,
        budget=budget,
        protocol=protocol,
        scores=scores,
        calibration=Calibration(windows, "random", 0),
        heldout=heldout,
        batch_size=batch_size,
        adaptive="off",  # the scan's probes, reused: no tranches
        certify=protocol == "auto",  # SLEB is timed as published; auto decides by it
        progress=False,
    )
    s = plan.to_dict()["scores"]  # the per-block values and the records, as in plan.json
    record = dict(s.get("auto") or {})
    if "certificate" in s:
        record["certificate"] = s["certificate"]
        record["compute"] = s.get("compute")
    calls = s.get("oracle_calls", record.get("oracle_calls", 0))
    return Selected(sorted(plan.removed), s.get("order"), s.get("importance"), int(calls), record)


def auto_certificate(selected: Selected) -> dict | None:
    """The certificate ``auto`` gives for its selection (``plan.records.certificate``)."""
    return selected.record.get("certificate")


# ----------------------------------------------------------------------------- clocks, memory
BOTH = ("replacement", "interchange")
KEYS = ("repl_ij", "repl_ji", "inter")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
GIB = 2**30


def clock(device: str) -> float:
    """Wall seconds after the device has finished the work queued so far."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter()


class Peak:
    """Peak memory of a section: CUDA ``max_memory_allocated`` since entry; on CPU the
    process's resident high-water mark (``ru_maxrss``: lifetime, not per section)."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")
        self.bytes = 0

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
            self.bytes = torch.cuda.max_memory_allocated()
        else:
            self.bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


# ----------------------------------------------------------------------------- work counts
def min_blocks(L: int, i: int, j: int) -> int:
    """Least block evaluations of pair ``i < j`` with both protocols (base pass excluded).

    ``repl_ij`` and ``inter`` share slots ``i..j-1`` and then run ``L - j`` each;
    ``repl_ji`` starts at slot ``j`` (eval/BENCHMARKS.md, "Cost floor").
    """
    return (j - i) + 3 * (L - j)


def sleb_block_evals(L: int, order: list[int]) -> int:
    """Block evaluations per batch of SLEB-iterative with prefix reuse, following ``order``.

    Step ``k`` (``k`` blocks removed) asks for every remaining block ``b`` the
    model without ``removed + [b]``; that plan equals the base up to its first
    removed block, so it runs ``L - k - 1 - min(removed + [b])`` blocks. Plus
    the one base pass that every call starts from.
    """
    total, removed = L, []
    for k in range(len(order)):
        for b in range(L):
            if b not in removed:
                total += L - k - 1 - min(removed + [b])
        removed.append(order[k])
    return total


def sleb_calls(L: int, n: int) -> int:
    """Oracle calls of SLEB-iterative: every remaining block, at each of ``n`` steps."""
    return n * L - n * (n - 1) // 2


@dataclass
class UnitCosts:
    """Seconds per batch ``[B, T]`` of the pieces the estimates are made of."""

    capture_s: float  # a base pass, taken as L blocks (the embedding and masks are small)
    first_capture_s: float  # the first base pass as measured (includes the device's warm-up)
    block_s: float  # one block
    head_s: float  # final norm + LM head at every position
    kl_s: float  # swapprune's KL over every position of the batch


def unit_costs(model, ids: torch.Tensor, device: str, reps: int) -> UnitCosts:
    """Best of ``reps`` (after one warm-up) of each piece on one batch.

    The base pass is run once, not timed repeatedly: on an 8B model in fp32 it
    takes seconds, and ``L`` times a block predicts it.
    """
    runner = PlanRunner(model)
    stack = runner.stack

    def best(fn):
        fn()
        out = math.inf
        for _ in range(reps):
            t0 = clock(device)
            fn()
            out = min(out, clock(device) - t0)
        return out

    with torch.no_grad():
        t0 = clock(device)
        cache = runner.capture(ids)
        first = clock(device) - t0
        mid = stack.num_layers // 2
        block = best(lambda: runner.run_block(mid, cache.hidden[mid], cache))
        head = best(lambda: stack.head(cache.hidden[-1]))
        a = stack.head(cache.hidden[-1]).reshape(-1, model.config.vocab_size)
        b = stack.head(cache.hidden[-2]).reshape(-1, model.config.vocab_size)
        kl = best(lambda: kl_rows(a, b))
    return UnitCosts(stack.num_layers * block, first, block, head, kl)


# ----------------------------------------------------------------------------- the run
@dataclass
class Bench:
    """Settings, the budget, what has been measured, and the JSON it becomes."""

    args: argparse.Namespace
    device: str
    out: Path
    rows: list[dict] = field(default_factory=list)
    scans: dict = field(default_factory=dict)  # (family, dtype) -> ScoreResult
    scan_rows: dict = field(default_factory=dict)  # (family, dtype) -> scan row
    sleb: dict = field(default_factory=dict)  # family -> Selected
    sleb_call_s: dict = field(default_factory=dict)  # (family, dtype) -> SLEB seconds per call
    naive_call_s: dict = field(default_factory=dict)  # family -> mean naive SLEB call seconds
    report: dict = field(default_factory=dict)

    def left(self) -> float:
        return self.args.budget_s - (time.perf_counter() - START)

    def log(self, msg: str) -> None:
        print(f"[{time.perf_counter() - START:6.1f} s] {msg}", flush=True)

    def save(self) -> None:
        self.report["rows"] = self.rows
        self.report["elapsed_s"] = time.perf_counter() - START
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.report, indent=1, default=_jsonable))
        tmp.replace(self.out)


def _jsonable(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (set, frozenset)):
        return sorted(x)
    return str(x)


@dataclass
class Loaded:
    """The model of one (family, dtype) and what was measured on it once."""

    family: str
    dtype: str
    model: object
    ids: torch.Tensor
    L: int
    param_bytes: int
    fpt: float  # block FLOPs per token
    fpr: float  # head FLOPs per row
    uc: UnitCosts
    n_batches: int


def tflops(flop: float, seconds: float) -> float:
    return flop / seconds / 1e12 if seconds > 0 else float("nan")


def section_scan(b: Bench, m: Loaded, estimate: float) -> dict:
    """Both protocols over every adjacent pair, positions all: the library's scoring."""
    a = b.args
    pairs = parse_pairs("adjacent", m.L)
    with Peak(b.device) as peak:
        t0 = clock(b.device)
        res = score(
            m.model,
            calibration=m.ids,
            pairs=pairs,
            protocols=BOTH,
            positions="all",
            batch_size=a.batch_size,
            cache_gb=a.cache_gb,
            progress=False,
        )
        wall = clock(b.device) - t0
    timing = res.meta["timing"]
    n, t = m.ids.shape
    # Every batch runs the same plans, so block evaluations per batch x all tokens.
    block_flop = timing["block_evals"] / m.n_batches * n * t * m.fpt
    head_flop = timing["head_rows"] * m.fpr
    floor = (m.L + sum(min_blocks(m.L, i, j) for i, j in pairs)) * m.n_batches
    row = dict(
        pairs=len(pairs),
        plans=3 * len(pairs),
        wall_s=wall,
        block_evals=timing["block_evals"],
        floor_block_evals=floor,
        naive_block_evals=(3 * len(pairs) + 1) * m.L * m.n_batches,
        head_rows=timing["head_rows"],
        block_tflops=tflops(block_flop, wall),
        all_tflops=tflops(block_flop + head_flop, wall),
        distances={p: [res.distance(p, i, j) for i, j in pairs] for p in BOTH},
        pair_list=pairs,
    )
    row["pct_peak"] = 100 * row["block_tflops"] / a.peak_tflops
    b.scans[(m.family, m.dtype)] = res
    b.scan_rows[(m.family, m.dtype)] = row
    return row | _memory(peak, m)


def section_naive_scan(b: Bench, m: Loaded, estimate: float) -> dict:
    """The literal definition on a subset of the pairs, scaled per pair to all of them."""
    res = b.scans[(m.family, m.dtype)]
    pairs = parse_pairs("adjacent", m.L)
    k = _naive_pair_count(b, m)
    subset = [pairs[i] for i in sorted(set(np.linspace(0, len(pairs) - 1, k).round().astype(int)))]
    L, bs = m.L, b.args.batch_size
    values = {p: {key: [] for key in KEYS} for p in subset}
    base_s, pair_s = 0.0, dict.fromkeys(subset, 0.0)
    with Peak(b.device) as peak, torch.no_grad():
        for s in range(0, m.ids.shape[0], bs):
            x = m.ids[s : s + bs].to(b.device)
            t0 = clock(b.device)
            base = naive.plan_logits(m.model, tuple(range(L)), x)
            base_s += clock(b.device) - t0
            for p in subset:
                t0 = clock(b.device)
                for key, plan in pair_probe_plans(L, *p, BOTH).items():
                    logits = naive.plan_logits(m.model, plan, x)
                    kl = naive.kl_per_window(base, logits, "all").cpu().numpy()
                    values[p][key].append(kl)
                    del logits
                pair_s[p] += clock(b.device) - t0
            del base
    per_pair = float(np.mean(list(pair_s.values())))
    naive_s = base_s + len(pairs) * per_pair
    n, t = m.ids.shape
    forwards = (1 + 3 * len(subset)) * m.n_batches
    measured = base_s + sum(pair_s.values())
    flop = forwards * (L * m.fpt + m.fpr) * n * t / m.n_batches
    worst_window, worst_distance = 0.0, 0.0
    for p in subset:
        for key in KEYS:
            ref = np.concatenate(values[p][key])
            got = np.asarray(res.pairs[p][key])
            worst_window = max(worst_window, _rel(got, ref))
            worst_distance = max(worst_distance, _rel(np.mean(got), np.mean(ref)))
    fast = b.scan_rows[(m.family, m.dtype)]["wall_s"]
    return dict(
        pairs_total=len(pairs),
        pairs_measured=subset,
        scaled=len(subset) < len(pairs),
        base_s=base_s,
        per_pair_s=[pair_s[p] for p in subset],
        measured_s=measured,
        naive_s=naive_s,
        fast_s=fast,
        speedup=naive_s / fast,
        block_tflops=tflops(forwards * L * m.fpt * n * t / m.n_batches, measured),
        all_tflops=tflops(flop, measured),
        pct_peak=100
        * tflops(forwards * L * m.fpt * n * t / m.n_batches, measured)
        / b.args.peak_tflops,
        max_rel_diff_per_window=worst_window,
        max_rel_diff_distance=worst_distance,
    ) | _memory(peak, m)


def _naive_pair_count(b: Bench, m: Loaded) -> int:
    """Pairs the naive subset measures: the flag's count, fewer if time is short (at least 1)."""
    want = b.args.naive_pairs_bf16 if m.dtype == "bf16" else b.args.naive_pairs_fp32
    per_pair = m.n_batches * 3 * (m.uc.capture_s + m.uc.head_s + 2 * m.uc.kl_s)
    base = m.n_batches * (m.uc.capture_s + m.uc.head_s)
    fits = int((b.left() / b.args.margin - base) // per_pair) if per_pair > 0 else want
    return max(1, min(want, fits, m.L - 1))


def section_sleb(b: Bench, m: Loaded, estimate: float) -> dict:
    """SLEB-iterative to ``--sleb-n`` through the selection adapter."""
    a = b.args
    with Peak(b.device) as peak:
        t0 = clock(b.device)
        sel = select_blocks(m.model, m.ids, "sleb", a.sleb_n, batch_size=a.batch_size)
        wall = clock(b.device) - t0
    b.sleb[m.family] = sel
    b.sleb_call_s[(m.family, m.dtype)] = wall / max(1, sel.oracle_calls)
    n, t = m.ids.shape
    evals = sleb_block_evals(m.L, sel.order) * m.n_batches
    block_flop = evals / m.n_batches * n * t * m.fpt
    head_flop = sel.oracle_calls * n * t * m.fpr
    return dict(
        n=a.sleb_n,
        removed=sel.removed,
        order=sel.order,
        oracle_calls=sel.oracle_calls,
        expected_calls=sleb_calls(m.L, a.sleb_n),
        wall_s=wall,
        block_evals=evals,
        block_tflops=tflops(block_flop, wall),
        all_tflops=tflops(block_flop + head_flop, wall),
        pct_peak=100 * tflops(block_flop, wall) / a.peak_tflops,
    ) | _memory(peak, m)


def naive_ppl(model, kept, ids: torch.Tensor, batch_size: int, device: str) -> float:
    """Calibration perplexity of ``model`` running ``kept``, by plain forwards (SLEB's definition)."""
    nll, count = 0.0, 0
    for s in range(0, ids.shape[0], batch_size):
        x = ids[s : s + batch_size].to(device)
        logits = naive.plan_logits(model, kept, x)[:, :-1]
        nll += float(
            F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"
            )
        )
        count += x[:, 1:].numel()
    return math.exp(nll / count)


def section_naive_sleb(b: Bench, m: Loaded, estimate: float) -> dict:
    """SLEB with every oracle call a plain forward of the pruned model.

    ``--naive-sleb-calls 0``: the whole literal SLEB, its own choices (compared
    with the fast selection). Otherwise that many calls per step on the fast
    selection's path, scaled by the calls of each step.
    """
    a = b.args
    sel = b.sleb[m.family]
    L, full = m.L, a.naive_sleb_calls == 0
    removed: list[int] = []
    step_s: list[float] = []
    measured_calls = 0
    first: dict[int, float] = {}
    with Peak(b.device) as peak:
        for k in range(a.sleb_n):
            left = [x for x in range(L) if x not in removed]
            if full:
                todo = left
            else:
                idx = np.linspace(0, len(left) - 1, min(a.naive_sleb_calls, len(left)))
                todo = [left[i] for i in sorted(set(idx.round().astype(int)))]
            costs, spent = {}, 0.0
            for x in todo:
                kept = tuple(c for c in range(L) if c not in removed and c != x)
                t0 = clock(b.device)
                costs[x] = naive_ppl(m.model, kept, m.ids, a.batch_size, b.device)
                spent += clock(b.device) - t0
            measured_calls += len(todo)
            if k == 0:
                first = costs
            step_s.append(spent / len(todo) * len(left))  # this step's naive time, scaled
            removed.append(min(costs, key=lambda c: (costs[c], c)) if full else sel.order[k])
    naive_s = float(sum(step_s))
    b.naive_call_s[m.family] = naive_s / sleb_calls(L, a.sleb_n)
    fast = next(r for r in b.rows if r["task"] == f"{m.family}:{m.dtype}:sleb")["wall_s"]
    diffs = [_rel(sel.first_costs[x], v) for x, v in first.items()] if sel.first_costs else []
    return dict(
        calls_total=sleb_calls(L, a.sleb_n),
        calls_measured=measured_calls,
        scaled=not full,
        step_s=step_s,
        naive_s=naive_s,
        fast_s=fast,
        speedup=naive_s / fast,
        naive_order=removed if full else None,
        same_selection=sorted(removed) == sel.removed if full else None,
        max_rel_diff_first_step=max(diffs) if diffs else None,
    ) | _memory(peak, m)


def section_auto(b: Bench, m: Loaded, estimate: float) -> dict:
    """``auto`` to ``--auto-n`` on this model's scan scores, through the selection adapter."""
    a = b.args
    res = b.scans[(m.family, m.dtype)]
    with Peak(b.device) as peak:
        t0 = clock(b.device)
        sel = select_blocks(m.model, m.ids, "auto", a.auto_n, batch_size=a.batch_size, scores=res)
        wall = clock(b.device) - t0
    scan_s = b.scan_rows[(m.family, m.dtype)]["wall_s"]
    naive_scan = next(
        (r for r in b.rows if r["task"] == f"{m.family}:{m.dtype}:naive_scan" and "naive_s" in r),
        None,
    )
    naive_s, call_source = None, None
    if naive_scan is not None:
        # One naive oracle call is a plain forward of a pruned model: naive SLEB's mean call
        # when it ran, else the naive scan's base forward (all L blocks: an upper bound).
        if m.family in b.naive_call_s:
            call_s, call_source = b.naive_call_s[m.family], "naive_sleb mean call"
        else:
            call_s, call_source = naive_scan["base_s"], "naive_scan base forward"
        naive_s = naive_scan["naive_s"] + sel.oracle_calls * call_s
    regime = sel.record.get("regime") or {}
    total = scan_s + wall
    return dict(
        n=a.auto_n,
        removed=sel.removed,
        regime=regime.get("call"),
        regime_confidence=regime.get("confidence"),
        action=sel.record.get("action"),
        oracle_calls=sel.oracle_calls,
        selection_s=wall,
        scan_s=scan_s,
        wall_s=total,
        naive_s=naive_s,
        naive_call_source=call_source,
        speedup=naive_s / total if naive_s else None,
        certificate=auto_certificate(sel),
        compute=sel.record.get("compute"),
    ) | _memory(peak, m)


def _memory(peak: Peak, m: Loaded) -> dict:
    return dict(
        peak_gib=peak.bytes / GIB,
        param_gib=m.param_bytes / GIB,
        peak_over_params=peak.bytes / m.param_bytes,
        memory_kind="cuda max_memory_allocated" if peak.cuda else "process ru_maxrss (lifetime)",
    )


def _rel(got, ref) -> float:
    got, ref = np.asarray(got, dtype=float), np.asarray(ref, dtype=float)
    return float(np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-30)))


# ----------------------------------------------------------------------------- estimates
def estimate(section: str, b: Bench, m: Loaded) -> float:
    """Seconds a section should take on this model, from its unit costs (for the budget guard)."""
    uc, nb, L, a = m.uc, m.n_batches, m.L, b.args
    pairs = parse_pairs("adjacent", L)
    if section == "scan":
        blocks = sum(min_blocks(L, i, j) for i, j in pairs)
        return nb * (
            uc.capture_s + blocks * uc.block_s + (3 * len(pairs) + 1) * (uc.head_s + uc.kl_s)
        )
    if section == "naive_scan":
        k = 1  # at least one pair; _naive_pair_count takes more when they fit
        return nb * ((1 + 3 * k) * (uc.capture_s + uc.head_s) + 3 * k * 2 * uc.kl_s)
    if section == "sleb":
        calls = sleb_calls(L, a.sleb_n)
        # each step runs at most the first step's L (L - 1) / 2 blocks
        return nb * (uc.capture_s + a.sleb_n * L * (L - 1) / 2 * uc.block_s + calls * uc.head_s)
    if section == "naive_sleb":
        per = a.naive_sleb_calls or L
        return a.sleb_n * per * nb * (uc.capture_s + uc.head_s)
    if section == "auto":
        # at most auto's default cap, half of SLEB's calls; per call what SLEB's took when
        # it ran on this model (prefix reuse makes a call about half a pass), else a full pass
        calls = sleb_calls(L, a.auto_n) / 2
        sleb = b.sleb_call_s.get((m.family, m.dtype))
        return calls * (sleb if sleb is not None else nb * (uc.capture_s + uc.head_s))
    raise ValueError(section)


SECTIONS = {
    "scan": section_scan,
    "naive_scan": section_naive_scan,
    "sleb": section_sleb,
    "naive_sleb": section_naive_sleb,
    "auto": section_auto,
}
# What a section needs measured first on the same (family, dtype).
NEEDS = {"naive_scan": "scan", "auto": "scan", "naive_sleb": "sleb"}


def default_tasks(families: list[str]) -> list[tuple[str, str, str]]:
    """Priority order: what the issue's targets need first, then the rest of the first
    family, then the other families.

    1. the first family's bf16 scan and its naive run (the headline: bf16 at 8B),
    2. its fp32 scan and naive run (exactness, the fp32 speed-up, the bf16 ranking check),
    3. its SLEB and auto,
    4. every other family: bf16 scan and naive, SLEB and auto, fp32 last.

    The budget guard skips what does not fit, so a short budget loses the end of the list.
    """
    first, rest = families[0], families[1:]
    tasks = [(first, "bf16", s) for s in ("scan", "naive_scan")]
    tasks += [(first, "fp32", s) for s in ("scan", "naive_scan")]
    tasks += [(first, "bf16", s) for s in ("sleb", "naive_sleb", "auto")]
    for f in rest:
        tasks += [(f, "bf16", s) for s in ("scan", "naive_scan", "sleb", "naive_sleb", "auto")]
        tasks += [(f, "fp32", s) for s in ("scan", "naive_scan")]
    return tasks


def load(b: Bench, family: str, dtype: str) -> Loaded:
    a = b.args
    t0 = clock(b.device)
    model, fingerprint = build_model(family, DTYPES[dtype], b.device, a.seed, a.tiny)
    built = clock(b.device) - t0
    cfg = model.config
    ids = random_windows(cfg.vocab_size, a.windows, a.tokens, a.seed)
    uc = unit_costs(model, ids[: a.batch_size], b.device, a.micro_reps)
    m = Loaded(
        family,
        dtype,
        model,
        ids,
        decoder_stack(model).num_layers,
        param_bytes(model),
        block_flops_per_token(cfg, a.tokens),
        head_flops_per_row(cfg),
        uc,
        math.ceil(a.windows / a.batch_size),
    )
    fam = b.report["families"].setdefault(
        family,
        dict(
            blocks=m.L,
            hidden=cfg.hidden_size,
            mlp=cfg.intermediate_size,
            heads=cfg.num_attention_heads,
            kv_heads=cfg.num_key_value_heads,
            head_dim=cfg.head_dim,
            vocab=cfg.vocab_size,
            parameters=sum(p.numel() for p in model.parameters()),
            block_flops_per_token=m.fpt,
            head_flops_per_row=m.fpr,
            fp32_fingerprint=fingerprint["weights"],
        ),
    )
    # Rebuilds must give the same weights, or bf16 vs fp32 compares two models.
    fam.setdefault("same_weights_every_build", True)
    fam["same_weights_every_build"] &= fam["fp32_fingerprint"] == fingerprint["weights"]
    b.rows.append(
        dict(
            task=f"{family}:{dtype}:build",
            family=family,
            dtype=dtype,
            section="build",
            status="done",
            wall_s=built,
            unit_costs=uc.__dict__,
            param_gib=m.param_bytes / GIB,
        )
    )
    b.log(
        f"{family} {dtype}: built in {built:.1f} s, {m.param_bytes / GIB:.2f} GiB of parameters; "
        f"per batch [{min(a.batch_size, a.windows)}, {a.tokens}]: base pass {uc.capture_s * 1e3:.1f} ms, "
        f"block {uc.block_s * 1e3:.2f} ms, head {uc.head_s * 1e3:.2f} ms, KL {uc.kl_s * 1e3:.2f} ms"
    )
    return m


def run_tasks(b: Bench, tasks) -> None:
    loaded: Loaded | None = None
    for family, dtype, section in tasks:
        name = f"{family}:{dtype}:{section}"
        row = dict(task=name, family=family, dtype=dtype, section=section)
        need = NEEDS.get(section)
        if need and not any(
            r["task"] == f"{family}:{dtype}:{need}" and r["status"] == "done" for r in b.rows
        ):
            b.rows.append(row | dict(status="skipped", reason=f"needs {need}, which did not run"))
            b.log(f"{name}: skipped (needs {need})")
            continue
        if loaded is None or (loaded.family, loaded.dtype) != (family, dtype):
            loaded = None
            _free(b.device)
            if b.left() < b.args.min_build_s:
                b.rows.append(
                    row | dict(status="skipped", reason="no time left to build the model")
                )
                b.log(f"{name}: skipped (no time to build the model)")
                continue
            loaded = load(b, family, dtype)
        est = estimate(section, b, loaded)
        row["estimate_s"] = est
        if est * b.args.margin > b.left():
            b.rows.append(
                row
                | dict(
                    status="skipped",
                    reason=f"estimate {est:.0f} s x {b.args.margin} > {b.left():.0f} s left",
                )
            )
            b.log(f"{name}: skipped (estimate {est:.0f} s, {b.left():.0f} s left)")
            b.save()
            continue
        b.log(f"{name}: running (estimate {est:.1f} s, {b.left():.0f} s left)")
        try:
            out = SECTIONS[section](b, loaded, est)
            b.rows.append(row | dict(status="done") | out)
        except Exception as e:  # keep going: one failure must not cost the other sections
            b.rows.append(row | dict(status="failed", error=f"{type(e).__name__}: {e}"[:2000]))
            b.log(f"{name}: FAILED {type(e).__name__}: {e}")
            _free(b.device)
        else:
            b.log(f"{name}: {format_row(b.rows[-1], b.args.peak_tflops)}")
            if section == "scan":
                add_ranking(b, family)
        b.save()
    del loaded
    _free(b.device)


def _free(device: str) -> None:
    import gc

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- results
def spearman(a, b) -> float:
    """Spearman's rho with average ranks for ties (numpy only: no scipy on the GPU machine)."""

    def ranks(x):
        x = np.asarray(x, dtype=float)
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(1, len(x) + 1)
        for v in np.unique(x):  # ties share their mean rank
            tie = x == v
            r[tie] = r[tie].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float((ra**2).sum() * (rb**2).sum()))
    return float((ra * rb).sum() / den) if den else float("nan")


def ranking(b: Bench, family: str) -> dict | None:
    """bf16 vs fp32 exact for one family, per protocol; ``None`` until both scans exist."""
    r16, r32 = b.scan_rows.get((family, "bf16")), b.scan_rows.get((family, "fp32"))
    if r16 is None or r32 is None:
        return None
    pairs = r32["pair_list"]
    out = {}
    for p in BOTH:
        d16, d32 = np.array(r16["distances"][p]), np.array(r32["distances"][p])
        top16 = [pairs[k] for k in np.argsort(d16, kind="stable")[:5]]
        top32 = [pairs[k] for k in np.argsort(d32, kind="stable")[:5]]
        out[p] = dict(
            spearman=spearman(d16, d32),
            top5_same_set=sorted(top16) == sorted(top32),
            top5_bf16=top16,
            top5_fp32=top32,
            max_rel_err=_rel(d16, d32),
            median_rel_err=float(np.median(np.abs(d16 - d32) / np.abs(d32))),
        )
    same = b.report["families"][family].get("same_weights_every_build")
    return dict(
        task=f"{family}:bf16-vs-fp32:spearman",
        family=family,
        dtype="bf16 vs fp32",
        section="spearman",
        status="done",
        same_weights=same,
        **out,
    )


def add_ranking(b: Bench, family: str, final: bool = False) -> None:
    """Append the family's ranking row once it can be computed (or, at the end, why not)."""
    task = f"{family}:bf16-vs-fp32:spearman"
    if any(r["task"] == task for r in b.rows):
        return
    row = ranking(b, family)
    if row is not None:
        b.rows.append(row)
        b.log(f"{task}: " + ", ".join(f"{p} {row[p]['spearman']:.4f}" for p in BOTH))
    elif final:
        b.rows.append(
            dict(
                task=task,
                family=family,
                dtype="bf16 vs fp32",
                section="spearman",
                status="skipped",
                reason="needs the bf16 and fp32 scans",
            )
        )


def targets(b: Bench) -> list[dict]:
    """The issue's targets, against what was measured (only meaningful at 8B on the GPU)."""
    out = []
    for r in b.rows:
        if r.get("status") != "done":
            continue
        if r["section"] == "scan" and r["dtype"] == "bf16":
            out.append(
                dict(
                    target="bf16 adjacent scan <= 60 s",
                    task=r["task"],
                    value=r["wall_s"],
                    met=r["wall_s"] <= 60,
                )
            )
            out.append(
                dict(
                    target="bf16 scan >= 35% of peak over block evaluations",
                    task=r["task"],
                    value=r["pct_peak"],
                    met=r["pct_peak"] >= 35,
                )
            )
        if r["section"] == "naive_scan" and r["dtype"] == "fp32":
            out.append(
                dict(
                    target="fp32 exact >= 2x over naive",
                    task=r["task"],
                    value=r["speedup"],
                    met=r["speedup"] >= 2,
                )
            )
        if r["section"] == "spearman":
            for p in BOTH:
                v = r[p]["spearman"]
                out.append(
                    dict(
                        target=f"bf16 Spearman >= 0.99 vs fp32 ({p})",
                        task=r["task"],
                        value=v,
                        met=v >= 0.99,
                    )
                )
    return out


def format_row(r: dict, peak: float) -> str:
    """One line of the table for a measured row."""
    s = r["section"]
    if s == "scan":
        return (
            f"{r['pairs']} pairs x 3 plans: {r['wall_s']:.2f} s, block evals {r['block_evals']} "
            f"(floor {r['floor_block_evals']}, naive {r['naive_block_evals']}), "
            f"{r['block_tflops']:.3g} TFLOP/s in blocks = {r['pct_peak']:.1f}% of {peak:.0f}, "
            f"peak {r['peak_gib']:.2f} GiB = {r['peak_over_params']:.2f}x parameters"
        )
    if s == "naive_scan":
        how = (
            f"{len(r['pairs_measured'])} of {r['pairs_total']} pairs measured, scaled per pair"
            if r["scaled"]
            else "every pair measured"
        )
        return (
            f"naive {r['naive_s']:.2f} s ({how}) vs fast {r['fast_s']:.2f} s: "
            f"{r['speedup']:.2f}x; naive {r['block_tflops']:.3g} TFLOP/s in blocks; "
            f"max rel diff per window {r['max_rel_diff_per_window']:.2e}"
        )
    if s == "sleb":
        return (
            f"removed {r['removed']} (order {r['order']}), {r['oracle_calls']} oracle calls, "
            f"{r['wall_s']:.2f} s, {r['block_tflops']:.3g} TFLOP/s in blocks = "
            f"{r['pct_peak']:.1f}% of {peak:.0f}"
        )
    if s == "naive_sleb":
        how = (
            f"{r['calls_measured']} of {r['calls_total']} calls measured, scaled per step"
            if r["scaled"]
            else "every call measured"
        )
        same = "" if r["same_selection"] is None else f", same selection {r['same_selection']}"
        return (
            f"naive {r['naive_s']:.2f} s ({how}) vs fast {r['fast_s']:.2f} s: "
            f"{r['speedup']:.2f}x{same}"
        )
    if s == "auto":
        vs = f", naive equivalent {r['naive_s']:.2f} s: {r['speedup']:.2f}x" if r["naive_s"] else ""
        return (
            f"regime {r['regime']}, removed {r['removed']}, {r['oracle_calls']} oracle calls, "
            f"selection {r['selection_s']:.2f} s + scan {r['scan_s']:.2f} s{vs}"
        )
    return ""


def table(b: Bench) -> str:
    """The summary table: one line per section, what was skipped, the targets."""
    peak = b.args.peak_tflops
    head = (
        f"{'task':34s} {'status':7s} {'fast s':>8s} {'naive s':>9s} {'speed-up':>8s} "
        f"{'TFLOP/s':>8s} {'% peak':>7s} {'peak GiB':>9s} {'x params':>8s}"
    )
    lines = [head, "-" * len(head)]
    for r in b.rows:
        if r["section"] == "build":
            continue
        if r["status"] != "done":
            lines.append(
                f"{r['task']:34s} {r['status']:7s} {r.get('reason') or r.get('error', '')}"
            )
            continue
        if r["section"] == "spearman":
            v = "  ".join(
                f"{p} rho {r[p]['spearman']:.4f}, top-5 same {r[p]['top5_same_set']}" for p in BOTH
            )
            lines.append(f"{r['task']:34s} {'done':7s} {v}")
            continue
        fast = r.get("fast_s", r.get("wall_s"))

        def num(v, fmt, width, suffix=""):
            text = format(v, fmt) + suffix if isinstance(v, (int, float)) else "-"
            return text.rjust(width)

        lines.append(
            f"{r['task']:34s} {'done':7s} {num(fast, '.2f', 8)} "
            f"{num(r.get('naive_s'), '.2f', 9, '*' if r.get('scaled') else ' ')} "
            f"{num(r.get('speedup'), '.2f', 8, 'x')} {num(r.get('block_tflops'), '.3g', 8)} "
            f"{num(r.get('pct_peak'), '.1f', 7)} {num(r.get('peak_gib'), '.2f', 9)} "
            f"{num(r.get('peak_over_params'), '.2f', 8)}"
        )
    lines += [
        "* naive measured on a stated subset (pairs, or SLEB calls per step) and scaled.",
        f"TFLOP/s: block FLOPs of the row's own run (naive rows: the naive run's) per second; "
        f"% peak of {peak:.0f} TFLOP/s. peak GiB: "
        + (
            "torch.cuda.max_memory_allocated in the section; x params: over the parameter bytes."
            if b.device.startswith("cuda")
            else "process ru_maxrss (CPU, lifetime high-water)."
        ),
    ]
    for t in b.report.get("targets", []):
        lines.append(
            f"target {t['target']:48s} {t['task']:30s} {t['value']:.4g} "
            f"{'met' if t['met'] else 'NOT met'}"
        )
    return "\n".join(lines)


def environment(device: str) -> dict:
    """Versions, device and driver (nvidia-smi when present)."""
    import transformers

    import swapprune

    env = dict(
        python=platform.python_version(),
        platform=platform.platform(),
        torch=torch.__version__,
        torch_cuda=torch.version.cuda,
        transformers=transformers.__version__,
        numpy=np.__version__,
        swapprune=swapprune.__version__,
        cpu_count=os.cpu_count(),
        torch_threads=torch.get_num_threads(),
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        allow_tf32=torch.backends.cuda.matmul.allow_tf32,
    )
    try:
        env["git_commit"] = (
            subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        env["git_commit"] = None
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        env.update(
            gpu=torch.cuda.get_device_name(0),
            gpu_memory_gib=props.total_memory / GIB,
            capability=f"{props.major}.{props.minor}",
            cudnn=torch.backends.cudnn.version(),
        )
        try:
            env["nvidia_smi"] = subprocess.run(
                [
                    "nvidia-smi",
                    "--query-gpu=name,driver_version,memory.total",
                    "--format=csv,noheader",
                ],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            env["nvidia_smi"] = f"not available ({type(e).__name__})"
    return env


# ----------------------------------------------------------------------------- main
def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tiny", action="store_true", help="CPU smoke run: tiny dims, same code path")
    ap.add_argument("--device", default=None, help="default: cuda (cpu with --tiny)")
    ap.add_argument("--families", default=",".join(SHAPES), help=f"comma list of {list(SHAPES)}")
    ap.add_argument(
        "--tasks",
        default=None,
        help="run only these FAMILY:DTYPE:SECTION (comma list; * matches anything)",
    )
    ap.add_argument("--windows", type=int, default=None, help="default 100 (tiny 8)")
    ap.add_argument("--tokens", type=int, default=None, help="default 128 (tiny 16)")
    ap.add_argument("--batch-size", type=int, default=None, help="default 50 (tiny 4)")
    ap.add_argument("--sleb-n", type=int, default=None, help="default 5 (tiny 2)")
    ap.add_argument("--auto-n", type=int, default=None, help="default 5 (tiny 2)")
    ap.add_argument("--naive-pairs-bf16", type=int, default=None, help="default 3 (tiny 2)")
    ap.add_argument("--naive-pairs-fp32", type=int, default=None, help="default 2 (tiny 2)")
    ap.add_argument(
        "--naive-sleb-calls",
        type=int,
        default=None,
        help="naive SLEB calls per step; 0 = the whole literal SLEB (default 2, tiny 0)",
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="stop starting sections after this many seconds from start (default 450, tiny 120)",
    )
    ap.add_argument(
        "--margin",
        type=float,
        default=1.3,
        help="a section runs only if margin x its estimate fits in the time left",
    )
    ap.add_argument(
        "--min-build-s",
        type=float,
        default=None,
        help="build a model only with this much time left (default 30, tiny 0)",
    )
    ap.add_argument(
        "--peak-tflops",
        type=float,
        default=790.0,
        help="the hardware limit: bf16 dense matrix peak of the device (H200: 790)",
    )
    ap.add_argument(
        "--cache-gb",
        type=float,
        default=None,
        help="score(cache_gb=): default 32 (one window chunk at 100 x 128), tiny 4",
    )
    ap.add_argument("--micro-reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="output file (default: see module doc)")
    a = ap.parse_args(argv)
    tiny = a.tiny
    for key, gpu, cpu in (
        ("device", "cuda", "cpu"),
        ("windows", 100, 8),
        ("tokens", 128, 16),
        ("batch_size", 50, 4),
        ("sleb_n", 5, 2),
        ("auto_n", 5, 2),
        ("naive_pairs_bf16", 3, 2),
        ("naive_pairs_fp32", 2, 2),
        ("naive_sleb_calls", 2, 0),
        ("budget_s", 420.0, 120.0),
        ("min_build_s", 30.0, 0.0),
        ("cache_gb", 32.0, 4.0),
    ):
        if getattr(a, key) is None:
            setattr(a, key, cpu if tiny else gpu)
    a.families = [f.strip() for f in a.families.split(",") if f.strip()]
    unknown = [f for f in a.families if f not in SHAPES]
    if unknown:
        ap.error(f"unknown families {unknown}; choose from {list(SHAPES)}")
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("no CUDA device here; --tiny runs the same code path on the CPU")
    return a


def _selected(task, patterns) -> bool:
    if patterns is None:
        return True
    return any(all(p in ("*", t) for p, t in zip(pat.split(":"), task)) for pat in patterns)


def main(argv=None) -> int:
    a = parse_args(argv)
    # fp32 is the exact mode: no TF32 anywhere (torch's default for matmul, not for cuDNN).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    name = "gpu_bench_tiny.json" if a.tiny else "gpu_bench.json"
    out = Path(a.json) if a.json else Path(os.environ.get("OUT") or HERE / "results") / name
    b = Bench(a, a.device, out)
    b.report = dict(
        bench="eval/gpu_bench.py",
        mode="tiny" if a.tiny else "gpu",
        started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        environment=environment(a.device),
        args=vars(a),
        flops=(
            "per block-token: 2H(n_q d + 2 n_kv d) + 2 n_q d H (attention projections) "
            "+ 6 H I (gated MLP) + 4 n_q d T (QK^T and AV over the full T x T); "
            "head: 2 H V per row; norms, rotary, activations, softmax and the KL not counted"
        ),
        families={},
    )
    env = b.report["environment"]
    b.log(
        f"torch {env['torch']} (CUDA {env['torch_cuda']}), transformers {env['transformers']}, "
        f"python {env['python']}; device {a.device}"
        + (f": {env['gpu']}; nvidia-smi: {env.get('nvidia_smi')}" if "gpu" in env else "")
    )
    b.log(
        f"{a.windows} windows x {a.tokens} tokens, batch {a.batch_size}; budget {a.budget_s:.0f} s"
    )
    patterns = a.tasks.split(",") if a.tasks else None
    tasks = [t for t in default_tasks(a.families) if _selected(t, patterns)]
    run_tasks(b, tasks)
    for family in a.families:
        add_ranking(b, family, final=True)
    b.report["targets"] = targets(b) if not a.tiny else []
    b.report["skipped"] = [
        dict(task=r["task"], reason=r["reason"]) for r in b.rows if r["status"] == "skipped"
    ]
    b.report["failed"] = [
        dict(task=r["task"], error=r["error"]) for r in b.rows if r["status"] == "failed"
    ]
    b.save()
    text = table(b)
    out.with_suffix(".txt").write_text(text + "\n")
    print(text)
    if b.report["skipped"]:
        print("skipped: " + "; ".join(f"{s['task']} ({s['reason']})" for s in b.report["skipped"]))
    print(f"total {time.perf_counter() - START:.1f} s; results in {out}")
    return 1 if b.report["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
