"""Benchmark ``swapprune.score`` against the literal definitions, in one process.

For every case (same model, pairs, windows, positions) this runs

* **naive**: the definitions as written (``swapprune.engine.naive``): the module list is
  rebuilt for each modified model and the plain HF forward computes logits at
  every position; KL via ``naive.kl_per_window``;
* **fast**: ``swapprune.score`` (prefix reuse, head only at measured positions),

and prints wall time, block evaluations, forward-equivalents, peak memory,
achieved FLOP/s against a matmul roofline measured in the same run, the cost
floor (least exact work, see ``floor_work``) and the exactness of the fast path.

Naive forwards are shared between cases with the same pairs and windows: every
modified model is run once, its forward and its KL (per positions mode) are
timed separately, and a case's naive time is the sum over the plans it needs
(exactly what a standalone naive run of that case executes).

Usage (see eval/BENCHMARKS.md)::

    python eval/bench_score.py                       # quick set: adjacent pairs, last and all
    python eval/bench_score.py --cases standard      # + all pairs (1 window), last and all
    python eval/bench_score.py --bf16                # + fast mode (bf16) vs fp32
    python eval/bench_score.py --cases none --sweep  # scaling sweep only
    python eval/bench_score.py --cases none --stability
    python eval/bench_score.py --device cuda --bf16  # on a GPU

On a CPU shared with other jobs add ``--threads 1 --clock cpu``: OpenMP threads
oversubscribed by other processes make wall times erratic, while one thread's
CPU time is not charged for the time other processes hold the core.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swapprune import naive  # noqa: E402
from swapprune.engine.orders import pair_probe_plans, parse_pairs  # noqa: E402
from swapprune.engine.probing import score  # noqa: E402
from swapprune.engine.runner import PlanRunner  # noqa: E402
from swapprune.model.stack import decoder_stack  # noqa: E402

PROTOCOL_KEYS = {"replacement": ("repl_ij", "repl_ji"), "interchange": ("inter",)}
BOTH = ("replacement", "interchange")


# --------------------------------------------------------------------------- utils
def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# Which clock the derived figures use: "wall" (perf_counter) or "cpu" (process
# time of all threads: with --threads 1 it is immune to other processes
# time-sharing the cores; with more threads it counts OpenMP spin-waits).
CLOCK = "wall"


def stamp(device: str) -> np.ndarray:
    """``[wall, cpu]`` seconds."""
    sync(device)
    return np.array([time.perf_counter(), time.process_time()])


def now(device: str) -> float:
    return float(stamp(device)[0 if CLOCK == "wall" else 1])


def pick(t: np.ndarray) -> float:
    """The selected clock's component of a ``[wall, cpu]`` duration."""
    return float(t[0 if CLOCK == "wall" else 1])


def _libc():
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


LIBC = _libc() if sys.platform.startswith("linux") else None


def release_freed_memory() -> None:
    """Return freed heap pages to the OS so the next phase's RSS baseline is honest."""
    import gc

    gc.collect()
    if LIBC is not None:
        LIBC.malloc_trim(0)


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class PeakMemory:
    """Peak memory above the level at entry.

    CPU: RSS sampled every 5 ms by a thread (psutil); ``getrusage`` maxrss is
    the process-lifetime high-water mark and only moves when a phase exceeds
    every earlier one, so it is recorded but not used for deltas.
    CUDA: ``torch.cuda.max_memory_allocated`` since entry.
    """

    def __init__(self, device: str):
        self.device = device
        self.peak_mb = 0.0

    def __enter__(self):
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated() / 2**20
            return self
        release_freed_memory()
        self.base = rss_mb()
        self._peak = self.base
        self._stop = threading.Event()

        def sample():
            while not self._stop.wait(0.005):
                self._peak = max(self._peak, rss_mb())

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            self.peak_mb = torch.cuda.max_memory_allocated() / 2**20 - self.base
        else:
            self._stop.set()
            self._thread.join()
            self._peak = max(self._peak, rss_mb())
            self.peak_mb = self._peak - self.base


def spearman(a, b) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


# --------------------------------------------------------------------- roofline
def roofline(device: str, n: int, reps: int) -> dict:
    """Best-of-``reps`` GFLOP/s of an ``n x n @ n x n`` matmul, fp32 and bf16."""
    out = {}
    for name, dt in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        a = torch.randn(n, n, device=device).to(dt)
        b = torch.randn(n, n, device=device).to(dt)
        a @ b
        best = math.inf
        for _ in range(reps):
            t0 = now(device)
            a @ b
            best = min(best, now(device) - t0)
        out[name] = 2 * n**3 / best / 1e9
    return out


# ------------------------------------------------------------------- unit costs
@dataclass
class UnitCosts:
    """Seconds per batch ``[B, T]`` of each operation, best of ``reps``."""

    batch: int
    tokens: int
    block: float = 0.0
    head_all: float = 0.0  # final norm + LM head on [B, T, H]
    head_last: float = 0.0  # ... on [B, 1, H]
    kl_all: float = 0.0  # probe.kl_rows on [B*T, V] logits (both log-softmaxes, float64)
    kl_last: float = 0.0
    kl_floor_all: float = 0.0  # KL given the base log-probs: one log-softmax + the reduction
    kl_floor_last: float = 0.0
    base_lsm_all: float = 0.0  # the base log-softmax, once per batch
    base_lsm_last: float = 0.0
    forward: float = 0.0  # plain HF forward, logits at every position
    naive_kl: dict = field(default_factory=dict)  # naive.kl_per_window per mode

    def be(self, seconds: float) -> float:
        """In block-equivalents."""
        return seconds / self.block


def measure_unit_costs(model, ids: torch.Tensor, device: str, reps: int) -> UnitCosts:
    from swapprune.engine.probes import kl_rows

    stack = decoder_stack(model)
    runner = PlanRunner(model, stack)
    b, t = ids.shape
    uc = UnitCosts(b, t)
    ids = ids.to(device)

    def best(fn):
        fn()
        out = math.inf
        for _ in range(reps):
            t0 = now(device)
            fn()
            out = min(out, now(device) - t0)
        return out

    with torch.no_grad():
        cache = runner.capture(ids)
        mid = stack.num_layers // 2
        h = cache.hidden[mid]
        uc.block = best(lambda: runner.run_block(mid, h, cache))
        hl = cache.hidden[-1]
        uc.head_all = best(lambda: stack.head(hl))
        uc.head_last = best(lambda: stack.head(hl[:, -1:]))
        logits = stack.head(hl).float()
        v = logits.shape[-1]
        base = logits.reshape(-1, v)
        other = stack.head(cache.hidden[-2]).float().reshape(-1, v)
        uc.kl_all = best(lambda: kl_rows(base, other))
        bl, ol = base.reshape(b, t, v)[:, -1], other.reshape(b, t, v)[:, -1]
        uc.kl_last = best(lambda: kl_rows(bl, ol))

        try:  # the probe's row chunk (keeps float64 temporaries in cache on CPU)
            from swapprune.engine.probes import _kl_chunk

            step = _kl_chunk(base)
        except ImportError:
            step = 256

        def lsm(x):
            return torch.cat(
                [
                    torch.log_softmax(x[s : s + step].double(), -1)
                    for s in range(0, x.shape[0], step)
                ]
            )

        def kl_given(logp, z):
            return torch.cat(
                [
                    (logp[s : s + step].exp() * (logp[s : s + step] - lsm(z[s : s + step]))).sum(-1)
                    for s in range(0, z.shape[0], step)
                ]
            )

        uc.base_lsm_all, uc.base_lsm_last = best(lambda: lsm(base)), best(lambda: lsm(bl))
        lp_all, lp_last = lsm(base), lsm(bl)
        uc.kl_floor_all = best(lambda: kl_given(lp_all, other))
        uc.kl_floor_last = best(lambda: kl_given(lp_last, ol))
        plan = tuple(range(stack.num_layers))
        uc.forward = best(lambda: naive.plan_logits(model, plan, ids))
        lg, lg2 = logits, other.reshape(b, t, v)
        for mode in ("last", "all"):
            uc.naive_kl[mode] = best(lambda m=mode: naive.kl_per_window(lg, lg2, m))
    return uc


# ------------------------------------------------------------------- floor model
def min_blocks(L: int, i: int, j: int, protocols) -> int:
    """Least block evaluations for pair ``i < j`` (base pass excluded).

    ``repl_ij`` and ``inter`` both start at slot ``i`` and agree on slots
    ``i..j-1`` (block j, then i+1..j-1), so with both protocols they share
    ``j - i`` blocks and then run ``L - j`` each; ``repl_ji`` starts at slot j.
    """
    r, x = "replacement" in protocols, "interchange" in protocols
    if r and x:
        return (j - i) + 3 * (L - j)
    if r:
        return (L - i) + (L - j)
    return L - i


def plan_count(pairs, protocols) -> int:
    return len(pairs) * sum(len(PROTOCOL_KEYS[p]) for p in protocols)


def floor_work(L, pairs, protocols, positions, uc: UnitCosts) -> dict:
    """Naive and least exact work per batch, in block-equivalents of ``uc``.

    naive: (plans + 1) forwards of L blocks + head at all T positions, and a
    KL per plan (``naive.kl_per_window``, which log-softmaxes both sides).
    floor: base pass (L blocks + head and log-softmax at the measured rows) +
    sum over pairs of ``min_blocks`` + per plan the head at the measured rows
    and a KL given the base log-probs (one log-softmax and the reduction).
    """
    n_plans = plan_count(pairs, protocols)
    last = positions == "last"
    head_m = uc.head_last if last else uc.head_all
    kl_m = uc.kl_floor_last if last else uc.kl_floor_all
    lsm_m = uc.base_lsm_last if last else uc.base_lsm_all
    naive_s = (n_plans + 1) * uc.forward + n_plans * uc.naive_kl[positions]
    blocks = L + sum(min_blocks(L, i, j, protocols) for i, j in pairs)
    floor_s = blocks * uc.block + (n_plans + 1) * head_m + lsm_m + n_plans * kl_m
    return {
        "naive_block_evals": (n_plans + 1) * L,
        "floor_block_evals": blocks,
        "naive_be": uc.be(naive_s),
        "floor_be": uc.be(floor_s),
        "floor_ratio": naive_s / floor_s,
        "naive_model_s": naive_s,  # per batch
        "floor_model_s": floor_s,
    }


# ------------------------------------------------------------------- naive runs
@dataclass
class NaiveRun:
    """Per-window KL of every plan, and the measured time of every plan."""

    values: dict  # mode -> {(i, j): {key: kl[N]}}
    forward_s: dict  # (i, j, key) -> seconds (all batches); ("base",) too
    kl_s: dict  # mode -> (i, j, key) -> seconds
    peak_mb: float
    forwards: int


def run_naive(
    model, ids, pairs, device, batch_size, reps: int = 1, modes=("last", "all")
) -> NaiveRun:
    """Run every plan ``reps`` times; keep each plan's fastest time (favours naive).

    The forward is timed once per plan, the KL per positions mode in ``modes``."""
    runs = [_run_naive(model, ids, pairs, device, batch_size, modes) for _ in range(reps)]
    best = runs[0]
    for r in runs[1:]:
        best.forward_s = {k: np.minimum(v, r.forward_s[k]) for k, v in best.forward_s.items()}
        best.kl_s = {
            m: {k: np.minimum(v, r.kl_s[m][k]) for k, v in d.items()} for m, d in best.kl_s.items()
        }
        best.peak_mb = max(best.peak_mb, r.peak_mb)
    return best


def _run_naive(model, ids, pairs, device, batch_size, modes=("last", "all")) -> NaiveRun:
    L = decoder_stack(model).num_layers
    n = ids.shape[0]
    values = {m: {} for m in modes}
    fwd: dict = {}
    kl: dict = {m: {} for m in modes}
    forwards = 0
    with PeakMemory(device) as mem, torch.no_grad():
        for s in range(0, n, batch_size):
            x = ids[s : s + batch_size].to(device)
            t0 = stamp(device)
            base = naive.plan_logits(model, tuple(range(L)), x)
            fwd[("base",)] = fwd.get(("base",), 0.0) + stamp(device) - t0
            forwards += 1
            for i, j in pairs:
                for key, plan in pair_probe_plans(L, i, j, BOTH).items():
                    t0 = stamp(device)
                    logits = naive.plan_logits(model, plan, x)
                    k = (i, j, key)
                    fwd[k] = fwd.get(k, 0.0) + stamp(device) - t0
                    forwards += 1
                    for mode in modes:
                        t0 = stamp(device)
                        v = naive.kl_per_window(base, logits, mode).double().cpu().numpy()
                        kl[mode][k] = kl[mode].get(k, 0.0) + stamp(device) - t0
                        store = values[mode].setdefault((i, j), {})
                        store[key] = np.concatenate([store.get(key, np.zeros(0)), v])
                    del logits
            del base
    return NaiveRun(values, fwd, kl, mem.peak_mb, forwards)


def naive_time(run: NaiveRun, pairs, protocols, positions) -> np.ndarray:
    """``[wall, cpu]`` seconds a standalone naive run of this case takes."""
    t = run.forward_s[("base",)]
    for i, j in pairs:
        for p in protocols:
            for key in PROTOCOL_KEYS[p]:
                t += run.forward_s[(i, j, key)] + run.kl_s[positions][(i, j, key)]
    return t


def distances(values: dict, protocols) -> dict:
    """``{protocol: {(i, j): distance}}`` (replacement = max of directions)."""
    out = {}
    for p in protocols:
        out[p] = {}
        for pair, v in values.items():
            if p == "replacement":
                out[p][pair] = max(float(np.mean(v["repl_ij"])), float(np.mean(v["repl_ji"])))
            else:
                out[p][pair] = float(np.mean(v["inter"]))
    return out


def directed(values: dict, protocols) -> list[float]:
    keys = [k for p in protocols for k in PROTOCOL_KEYS[p]]
    return [float(np.mean(values[pair][k])) for pair in sorted(values) for k in keys]


# -------------------------------------------------------------------- fast runs
def run_fast(model, ids, pairs, protocols, positions, batch_size, device, cache_gb=4.0):
    with PeakMemory(device) as mem:
        t0 = stamp(device)
        res = score(
            model,
            calibration=ids,
            pairs=pairs,
            protocols=protocols,
            positions=positions,
            batch_size=batch_size,
            cache_gb=cache_gb,
            n_boot=10,
            progress=False,
        )
        took = stamp(device) - t0
    return res, took, mem.peak_mb


def block_flops_per_token(model, T: int) -> tuple[float, float]:
    """Matmul FLOPs per token of one block (linear layers + full TxT attention) and of the head per row."""
    stack = decoder_stack(model)
    blk = stack.blocks[0]
    lin = sum(m.weight.numel() for m in blk.modules() if isinstance(m, nn.Linear))
    cfg = model.config
    heads = getattr(cfg, "num_attention_heads", None) or cfg.n_head
    hidden = getattr(cfg, "hidden_size", None) or cfg.n_embd
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    attn = 4 * heads * head_dim * T
    head = 2 * model.get_output_embeddings().weight.numel()
    return 2 * lin + attn, head


# ------------------------------------------------------------------------ cases
CASES = {
    # name: (pairs spec, protocols, positions, windows attr)
    "adj-last": ("adjacent", BOTH, "last", "windows"),
    "adj-all": ("adjacent", BOTH, "all", "windows"),
    "adj-last-repl": ("adjacent", ("replacement",), "last", "windows"),
    "adj-last-inter": ("adjacent", ("interchange",), "last", "windows"),
    "allpairs-last": ("all", BOTH, "last", "all_windows"),
    "allpairs-all": ("all", BOTH, "all", "all_windows"),
}
# quick: ~9 min of CPU time at 1 thread on the 2-core CPU of eval/BENCHMARKS.md
# (sum of its measured phases); standard adds all pairs on 1 window (~33 min)
SETS = {
    "quick": ["adj-last", "adj-all"],
    "standard": ["adj-last", "adj-all", "allpairs-last", "allpairs-all"],
    "full": list(CASES),
    "none": [],
}


def case_names(spec: str) -> list[str]:
    names = SETS[spec] if spec in SETS else spec.split(",")
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(
            f"unknown case(s) {unknown}; choose from {', '.join(CASES)} or {', '.join(SETS)}"
        )
    return names


def bench_cases(args, model, calib_ids, uc, roof, log) -> list[dict]:
    names = case_names(args.cases)
    L = decoder_stack(model).num_layers
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    naive_runs: dict = {}
    uc_cache: dict = {}
    rows = []
    for name in names:
        spec, protocols, positions, wattr = CASES[name]
        n = getattr(args, wattr)
        ids = calib_ids[:n]
        pairs = parse_pairs(spec, L)
        if (spec, n) not in naive_runs:
            modes = sorted(
                {
                    CASES[c][2]
                    for c in names
                    if CASES[c][0] == spec and getattr(args, CASES[c][3]) == n
                }
            )
            log(
                f"[{name}] naive: {len(pairs)} pairs x 3 plans + base, {n} windows, "
                f"{args.naive_reps} rep(s), KL for {modes} ..."
            )
            naive_runs[(spec, n)] = run_naive(
                model, ids, pairs, args.device, args.batch_size, args.naive_reps, modes
            )
        nr = naive_runs[(spec, n)]
        load_before = os.getloadavg()[0]
        naive_wc = naive_time(nr, pairs, protocols, positions)
        fast_wcs, res = [], None
        for _ in range(args.reps):
            res, took, fast_mem = run_fast(
                model, ids, pairs, protocols, positions, args.batch_size, args.device
            )
            fast_wcs.append(took)
        fast_wc = np.min(fast_wcs, axis=0)
        t_naive, t_fast = pick(naive_wc), pick(fast_wc)
        timing = res.meta["timing"]
        shape = (min(n, args.batch_size), ids.shape[1])
        if shape != (uc.batch, uc.tokens):  # unit costs at this case's batch shape
            uc_cache.setdefault(
                shape, measure_unit_costs(model, ids[: shape[0]], args.device, args.micro_reps)
            )
        fl = floor_work(L, pairs, protocols, positions, uc_cache.get(shape, uc))
        n_batches = math.ceil(n / args.batch_size)
        fpt, fpr = block_flops_per_token(model, ids.shape[1])
        T = ids.shape[1]
        n_plans = plan_count(pairs, protocols)
        naive_flop = (n_plans + 1) * n * T * (L * fpt + fpr)
        fast_flop = timing["block_evals"] / n_batches * n * T * fpt + timing["head_rows"] * fpr
        # exactness: distances of the fast path vs the literal definitions
        fast_vals = {p: {k: np.asarray(v) for k, v in d.items()} for p, d in res.pairs.items()}
        dn, dfast = distances(nr.values[positions], protocols), distances(fast_vals, protocols)
        rel, worst = max(
            (abs(dfast[p][q] - dn[p][q]) / max(abs(dn[p][q]), 1e-30), (p, q, dn[p][q]))
            for p in protocols
            for q in dn[p]
        )
        a, b = directed(nr.values[positions], protocols), directed(fast_vals, protocols)
        rel_dir = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b))
        row = {
            "case": name,
            "pairs": len(pairs),
            "protocols": list(protocols),
            "positions": positions,
            "windows": n,
            "tokens": T,
            "batch_size": args.batch_size,
            "dtype": dtype,
            "clock": CLOCK,
            "naive_s": t_naive,
            "fast_s": t_fast,
            "naive_wall_cpu_s": naive_wc.tolist(),
            "fast_wall_cpu_s": fast_wc.tolist(),
            "fast_wall_cpu_s_all_reps": [x.tolist() for x in fast_wcs],
            "speedup": t_naive / t_fast,
            "speedup_wall": naive_wc[0] / fast_wc[0],
            "speedup_cpu": naive_wc[1] / fast_wc[1],
            "naive_block_evals": (n_plans + 1) * L * n_batches,
            "fast_block_evals": timing["block_evals"],
            "floor_block_evals": fl["floor_block_evals"] * n_batches,
            "naive_fwd_equiv": (n_plans + 1) * n_batches,
            "fast_fwd_equiv": timing["block_evals"] / L,
            "fast_head_rows": timing["head_rows"],
            "naive_peak_mb": nr.peak_mb,
            "fast_peak_mb": fast_mem,
            "naive_gflops": naive_flop / t_naive / 1e9,
            "fast_gflops": fast_flop / t_fast / 1e9,
            "roofline_gflops": roof[dtype] if dtype in roof else float("nan"),
            "floor_ratio": fl["floor_ratio"],
            "naive_be": fl["naive_be"],
            "floor_be": fl["floor_be"],
            "measured_over_floor": (t_naive / t_fast) / fl["floor_ratio"],
            # time the least work takes at this run's unit costs / the fast path's time
            "fast_efficiency": fl["floor_model_s"] * n_batches / t_fast,
            "naive_model_over_measured": fl["naive_model_s"] * n_batches / t_naive,
            "max_rel_diff_distance": rel,
            "max_rel_diff_directed": rel_dir,
            "worst_distance": {"protocol": worst[0], "pair": worst[1], "naive": worst[2]},
            "cache_formula_mb": cache_mb(model, n, T, positions),
            "loadavg_1min_before_after": [load_before, os.getloadavg()[0]],
        }
        rows.append(row)
        log(format_case(row))
    return rows


def format_case(r: dict) -> str:
    roof = r["roofline_gflops"]
    return (
        f"[{r['case']}] {r['pairs']} pairs, {'+'.join(r['protocols'])}, positions={r['positions']}, "
        f"{r['windows']}x{r['tokens']} windows, {r['dtype']}\n"
        f"  wall          naive {r['naive_wall_cpu_s'][0]:8.2f} s   fast {r['fast_wall_cpu_s'][0]:8.2f} s"
        f"   ratio {r['speedup_wall']:.2f}x   (fast reps: "
        f"{', '.join(f'{x[0]:.2f}' for x in r['fast_wall_cpu_s_all_reps'])})\n"
        f"  cpu time      naive {r['naive_wall_cpu_s'][1]:8.2f} s   fast {r['fast_wall_cpu_s'][1]:8.2f} s"
        f"   ratio {r['speedup_cpu']:.2f}x   (fast reps: "
        f"{', '.join(f'{x[1]:.2f}' for x in r['fast_wall_cpu_s_all_reps'])})\n"
        f"  block evals   naive {r['naive_block_evals']:8d}     fast {r['fast_block_evals']:8d}"
        f"     floor {r['floor_block_evals']}\n"
        f"  fwd-equiv     naive {r['naive_fwd_equiv']:8.1f}     fast {r['fast_fwd_equiv']:8.1f}"
        f"     ratio {r['naive_fwd_equiv'] / r['fast_fwd_equiv']:.2f}x   (fast head rows {r['fast_head_rows']})\n"
        f"  peak RSS+     naive {r['naive_peak_mb']:8.0f} MB    fast {r['fast_peak_mb']:8.0f} MB\n"
        f"  GFLOP/s ({r['clock'][:4]}) naive {r['naive_gflops']:8.1f}      fast {r['fast_gflops']:8.1f}"
        f"      ({100 * r['naive_gflops'] / roof:.0f}% / {100 * r['fast_gflops'] / roof:.0f}% of "
        f"{roof:.0f} matmul roofline)\n"
        f"  floor         ratio {r['floor_ratio']:.2f}x (naive {r['naive_be']:.0f} vs floor "
        f"{r['floor_be']:.0f} block-eq/batch)   measured/floor {100 * r['measured_over_floor']:.0f}%"
        f"   ({r['clock']} clock)\n"
        f"                fast efficiency (least-work time at these unit costs / fast time) "
        f"{100 * r['fast_efficiency']:.0f}%; naive model/measured {100 * r['naive_model_over_measured']:.0f}%\n"
        f"  exactness     max rel diff of distances {r['max_rel_diff_distance']:.2e} "
        f"(at {r['worst_distance']}), of directed/per-protocol means {r['max_rel_diff_directed']:.2e}\n"
        f"  cache         formula (L+1)*N*T*H*bytes + N*P*V*4 = {r['cache_formula_mb']:.1f} MB; "
        f"load avg (1 min) before/after fast {r['loadavg_1min_before_after'][0]:.1f}/"
        f"{r['loadavg_1min_before_after'][1]:.1f}"
    )


def cache_mb(model, n: int, T: int, positions: str) -> float:
    """What ProbeEngine caches for ``n`` windows (one chunk): hidden states + base log-probs."""
    L = decoder_stack(model).num_layers
    H = getattr(model.config, "hidden_size", None) or model.config.n_embd
    V = model.get_output_embeddings().weight.shape[0]
    item = next(model.parameters()).element_size()
    P = 1 if positions == "last" else T
    return ((L + 1) * n * T * H * item + n * P * V * 4) / 2**20


# ----------------------------------------------------------------- bf16 fast mode
def bench_bf16(args, model32, calib_ids, case_rows, log) -> dict:
    """bf16 fast mode vs fp32 naive (timing) and vs fp32 exact (ranking)."""
    from swapprune.model.load import load_model

    model16, _, _ = load_model(args.model, dtype="bfloat16", device=args.device)
    L = decoder_stack(model32).num_layers
    pairs = parse_pairs("adjacent", L)
    out: dict = {}
    # timing on the windows of the adj-last case (its naive fp32 time is reused)
    base = next((r for r in case_rows if r["case"] == "adj-last"), None)
    ids = calib_ids[: args.windows]
    tooks = []
    for _ in range(args.reps):
        res16, took, mem = run_fast(model16, ids, pairs, BOTH, "last", args.batch_size, args.device)
        tooks.append(took)
    best = np.min(tooks, axis=0)
    out["clock"] = CLOCK
    out["bf16_fast_s"] = pick(best)
    out["bf16_fast_wall_cpu_s"] = best.tolist()
    out["bf16_fast_wall_cpu_s_all_reps"] = [x.tolist() for x in tooks]
    out["bf16_peak_mb"] = mem
    if base is not None:
        out["fp32_naive_s"] = base["naive_s"]
        out["fp32_fast_s"] = base["fast_s"]
        out["speedup_vs_fp32_naive"] = base["naive_s"] / out["bf16_fast_s"]
        out["speedup_vs_fp32_fast"] = base["fast_s"] / out["bf16_fast_s"]
        out["speedup_vs_fp32_naive_wall"] = base["naive_wall_cpu_s"][0] / best[0]
        out["speedup_vs_fp32_naive_cpu"] = base["naive_wall_cpu_s"][1] / best[1]
    # ranking on (possibly more) windows: fp32 exact vs bf16, same windows
    n = args.bf16_windows
    ids = calib_ids[:n]
    r32, t32, _ = run_fast(model32, ids, pairs, BOTH, "last", args.batch_size, args.device)
    r16, t16, _ = run_fast(model16, ids, pairs, BOTH, "last", args.batch_size, args.device)
    t32, t16 = pick(t32), pick(t16)
    out["ranking_windows"] = n
    out["ranking_fp32_fast_s"], out["ranking_bf16_fast_s"] = t32, t16
    for p in BOTH:
        d32 = np.array([r32.distance(p, i, j) for i, j in pairs])
        d16 = np.array([r16.distance(p, i, j) for i, j in pairs])
        top32 = [pairs[k] for k in np.argsort(d32)[:5]]
        top16 = [pairs[k] for k in np.argsort(d16)[:5]]
        rel = np.abs(d16 - d32) / np.abs(d32)
        s32 = np.sort(d32)
        out[p] = {
            "fp32": d32.tolist(),
            "bf16": d16.tolist(),
            # how close the 5th and 6th pairs are in fp32: a swap there is a near tie
            "fp32_gap_rank5_rank6_rel": float((s32[5] - s32[4]) / s32[4]),
            "spearman": spearman(d32, d16),
            "top5_fp32": top32,
            "top5_bf16": top16,
            "top5_same_set": set(top32) == set(top16),
            "top5_same_order": top32 == top16,
            "max_rel_err": float(rel.max()),
            "median_rel_err": float(np.median(rel)),
        }
    del model16
    msg = [
        f"[bf16 fast mode] adjacent, both protocols, last, {args.windows} windows: "
        f"wall {best[0]:.2f} s, cpu {best[1]:.2f} s (reps: "
        f"{', '.join(f'{x[0]:.2f}/{x[1]:.2f}' for x in tooks)}), peak RSS+ {mem:.0f} MB"
    ]
    if base is not None:
        msg.append(
            f"  speed-up vs fp32 naive: wall {out['speedup_vs_fp32_naive_wall']:.2f}x, "
            f"cpu {out['speedup_vs_fp32_naive_cpu']:.2f}x; vs fp32 fast "
            f"({CLOCK}) {out['speedup_vs_fp32_fast']:.2f}x"
        )
    msg.append(
        f"  ranking vs fp32 exact on {n} windows (fp32 {t32:.1f} s, bf16 {t16:.1f} s, {CLOCK}):"
    )
    for p in BOTH:
        q = out[p]
        msg.append(
            f"    {p:12s} Spearman {q['spearman']:.4f}  top-5 same set {q['top5_same_set']}"
            f" same order {q['top5_same_order']}  rel err median {q['median_rel_err']:.2e}"
            f" max {q['max_rel_err']:.2e}; fp32 gap rank 5->6 {100 * q['fp32_gap_rank5_rank6_rel']:.1f}%"
            f"\n      top5 fp32 {q['top5_fp32']}\n      top5 bf16 {q['top5_bf16']}"
        )
    log("\n".join(msg))
    return out


# ---------------------------------------------------------------------- sweep
def bench_sweep(args, model, calib_ids, log) -> dict:
    """Wall time vs number of pairs (4 windows) and vs number of windows (4 pairs)."""
    L = decoder_stack(model).num_layers
    adj = parse_pairs("adjacent", L)
    out = {"pairs": [], "windows": []}
    for k in args.sweep_pairs:
        idx = np.linspace(0, len(adj) - 1, k).round().astype(int)
        pairs = [adj[i] for i in sorted(set(idx))]
        ids = calib_ids[:4]
        nr = run_naive(model, ids, pairs, args.device, args.batch_size, modes=("last",))
        t_n = pick(naive_time(nr, pairs, BOTH, "last"))
        res, t_f, _ = run_fast(model, ids, pairs, BOTH, "last", args.batch_size, args.device)
        t_f = pick(t_f)
        row = {
            "pairs": len(pairs),
            "windows": 4,
            "naive_s": t_n,
            "fast_s": t_f,
            "fast_block_evals": res.meta["timing"]["block_evals"],
        }
        out["pairs"].append(row)
        log(
            f"[sweep pairs, {CLOCK}] {row['pairs']:3d} adjacent pairs x 4 windows: naive {t_n:7.2f} s  "
            f"fast {t_f:7.2f} s  ratio {t_n / t_f:.2f}x  fast block evals {row['fast_block_evals']}"
        )
    pairs = [adj[i] for i in np.linspace(0, len(adj) - 1, 4).round().astype(int)]
    for n in args.sweep_windows:
        ids = calib_ids[:n]
        nr = run_naive(model, ids, pairs, args.device, args.batch_size, modes=("last",))
        t_n = pick(naive_time(nr, pairs, BOTH, "last"))
        res, t_f, _ = run_fast(model, ids, pairs, BOTH, "last", args.batch_size, args.device)
        t_f = pick(t_f)
        row = {
            "pairs": len(pairs),
            "windows": n,
            "naive_s": t_n,
            "fast_s": t_f,
            "fast_block_evals": res.meta["timing"]["block_evals"],
        }
        out["windows"].append(row)
        log(
            f"[sweep windows, {CLOCK}] 4 pairs {pairs} x {n:3d} windows: naive {t_n:7.2f} s  fast {t_f:7.2f} s"
            f"  ratio {t_n / t_f:.2f}x  per window fast {t_f / n:.3f} s"
        )
    return out


# ------------------------------------------------------------- statistical efficiency
def bench_stability(args, model, calib_ids, log) -> dict:
    """Windows (and time) until the adjacent-pair ranking is stable under N -> 2N.

    Per-window KLs are independent across windows, so one pass over ``Nmax``
    windows gives every nested prefix; both positions modes come from that one
    pass (``score_modes``: same forwards, only the head rows differ). Stable at
    N: the top-5 pairs of the first N and of the first 2N windows are the same
    set and their Spearman is >= 0.95. The time to reach it is each mode's own
    measured cost per window (a separate run of that mode alone on
    ``--stability-timing-windows``) x 2N, since scoring 2N windows is what
    verifies it. Repeated over random orders of the windows.
    """
    from swapprune.engine.probing import score_modes

    L = decoder_stack(model).num_layers
    pairs = parse_pairs("adjacent", L)
    nmax = args.stability_windows
    ids = calib_ids[:nmax]
    rng = np.random.default_rng(0)
    orders = [np.arange(nmax)] + [rng.permutation(nmax) for _ in range(args.stability_orders - 1)]
    nt = min(args.stability_timing_windows, nmax)
    out: dict = {"windows": nmax, "orders": len(orders), "clock": CLOCK, "timing_windows": nt}
    per_window = {}
    for positions in ("last", "all"):
        _, took, _ = run_fast(
            model, calib_ids[:nt], pairs, BOTH, positions, args.batch_size, args.device
        )
        per_window[positions] = pick(took) / nt
        out[f"per_window_s_{positions}"] = per_window[positions]
        log(
            f"[stability] positions={positions} alone: {nt} windows in {pick(took):.1f} s {CLOCK} "
            f"-> {per_window[positions]:.2f} s/window"
        )
    t0 = stamp(args.device)
    results = score_modes(
        model,
        calibration=ids,
        modes=("last", "all"),
        pairs=pairs,
        protocols=BOTH,
        batch_size=args.batch_size,
        n_boot=10,
        progress=False,
    )
    took = stamp(args.device) - t0
    out["values_pass_wall_cpu_s"] = took.tolist()
    log(
        f"[stability] values: both modes, {nmax} windows in one pass: wall {took[0]:.0f} s, cpu {took[1]:.0f} s"
    )
    for positions in ("last", "all"):
        res = results[positions]
        out[positions] = {}
        for p in BOTH:
            if p == "replacement":  # distance = max over directions of their means
                vals = np.stack(
                    [np.stack([res.pairs[q]["repl_ij"], res.pairs[q]["repl_ji"]]) for q in pairs]
                )  # [P, 2, N]
            else:
                vals = np.stack([res.pairs[q]["inter"] for q in pairs])  # [P, N]

            def dist(order, n, p=p, vals=vals):
                sel = order[:n]
                if p == "replacement":
                    return vals[:, :, sel].mean(-1).max(-1)
                return vals[:, sel].mean(-1)

            steps = []
            n = 2
            while 2 * n <= nmax:
                rhos, same = [], []
                for order in orders:
                    a, b = dist(order, n), dist(order, 2 * n)
                    rhos.append(spearman(a, b))
                    same.append(set(np.argsort(a)[:5]) == set(np.argsort(b)[:5]))
                steps.append(
                    {
                        "n": n,
                        "spearman_median": float(np.median(rhos)),
                        "spearman_min": float(np.min(rhos)),
                        "top5_same_fraction": float(np.mean(same)),
                        "stable_fraction": float(
                            np.mean([r >= 0.95 and t for r, t in zip(rhos, same)])
                        ),
                    }
                )
                n *= 2
            found = []
            for order in orders:
                n_star = None
                for st in steps:
                    a, b = dist(order, st["n"]), dist(order, 2 * st["n"])
                    if set(np.argsort(a)[:5]) == set(np.argsort(b)[:5]) and spearman(a, b) >= 0.95:
                        n_star = st["n"]
                        break
                found.append(n_star)
            ok = [x for x in found if x is not None]
            full = dist(np.arange(nmax), nmax)
            out[positions][p] = {
                "n_star_per_order": found,
                "n_star_median": float(np.median(ok)) if len(ok) == len(found) else None,
                "seconds_to_stable_per_order": [
                    None if x is None else 2 * x * per_window[positions] for x in found
                ],
                "steps": steps,
                "top5_at_nmax": [pairs[k] for k in np.argsort(full)[:5]],
            }
    for positions in ("last", "all"):
        for p in BOTH:
            q = out[positions][p]
            secs = ["-" if x is None else f"{x:.0f}" for x in q["seconds_to_stable_per_order"]]
            log(
                f"  positions={positions:4s} {p:12s} stable N per order {q['n_star_per_order']}; "
                f"{CLOCK} s to verify (2N windows): {secs}; top-5 at {nmax}: {q['top5_at_nmax']}"
            )
            log(
                "      N->2N: "
                + "  ".join(
                    f"{st['n']}: rho med {st['spearman_median']:.3f} min {st['spearman_min']:.3f}, "
                    f"top5 same {st['top5_same_fraction']:.1f}, stable {st['stable_fraction']:.1f}"
                    for st in q["steps"]
                )
            )
    return out


# ------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", help="dtype of the exact-mode cases")
    ap.add_argument(
        "--cases",
        default="quick",
        help=f"quick | standard | full | none | comma list of {', '.join(CASES)}",
    )
    ap.add_argument("--windows", type=int, default=8, help="windows of the adjacent-pair cases")
    ap.add_argument("--all-windows", type=int, default=1, help="windows of the all-pairs cases")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    ap.add_argument("--reps", type=int, default=1, help="repetitions of each fast run (best kept)")
    ap.add_argument(
        "--naive-reps",
        type=int,
        default=1,
        help="repetitions of each naive run (each plan's best kept: favours naive)",
    )
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="clock of the derived figures (ratios, floor, FLOP/s); both are printed. "
        "cpu with --threads 1 is robust to other processes on the machine",
    )
    ap.add_argument("--micro-reps", type=int, default=5, help="repetitions of micro-benchmarks")
    ap.add_argument(
        "--roofline-n", type=int, default=None, help="matmul size (2048 CPU, 8192 CUDA)"
    )
    ap.add_argument("--bf16", action="store_true", help="fast mode: bf16 vs fp32")
    ap.add_argument(
        "--bf16-windows", type=int, default=32, help="windows of the bf16 ranking check"
    )
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--sweep-pairs", type=int, nargs="+", default=[1, 2, 4, 8, 16, 29])
    ap.add_argument("--sweep-windows", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--stability", action="store_true")
    ap.add_argument("--stability-windows", type=int, default=128)
    ap.add_argument("--stability-orders", type=int, default=5)
    ap.add_argument(
        "--stability-timing-windows",
        type=int,
        default=16,
        help="windows of the per-mode timing runs of --stability",
    )
    ap.add_argument(
        "--pool",
        type=int,
        default=256,
        help="calibration windows drawn (seed 0); every case uses the first N of them",
    )
    ap.add_argument("--json", default=None, help="write all figures here")
    args = ap.parse_args(argv)

    global CLOCK
    CLOCK = args.clock
    case_names(args.cases)  # fail before loading anything
    if args.clock == "cpu" and args.device.startswith("cuda"):
        ap.error("--clock cpu is meaningless on cuda")
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from swapprune.calibration.windows import load_calibration
    from swapprune.model.load import load_model

    def log(msg):
        print(msg, flush=True)

    t0 = time.perf_counter()
    load0 = os.getloadavg()
    model, tok, _ = load_model(args.model, dtype=args.dtype, device=args.device)
    L = decoder_stack(model).num_layers
    need = max(
        args.windows,
        args.all_windows,
        args.bf16_windows if args.bf16 else 0,
        args.stability_windows if args.stability else 0,
        max(args.sweep_windows) if args.sweep else 0,
    )
    # one fixed pool, so that "the first N windows" are the same in every run
    calib = load_calibration(tok, None, max(need, args.pool), args.tokens, 0).input_ids
    machine = {
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cuda": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None,
        "loadavg_at_start": load0,
    }
    log(f"machine: {machine}; clock for derived figures: {CLOCK}")
    log(
        f"model {args.model}: {L} blocks, {args.dtype}, loaded in {time.perf_counter() - t0:.1f} s; "
        f"memory: {'CUDA max_memory_allocated delta' if args.device.startswith('cuda') else 'RSS peak above phase start (psutil, 5 ms sampling)'}"
    )

    n_roof = args.roofline_n or (8192 if args.device.startswith("cuda") else 2048)
    roof = roofline(args.device, n_roof, args.micro_reps)
    log(
        f"matmul roofline {n_roof}^3: fp32 {roof['float32']:.0f} GFLOP/s, bf16 {roof['bfloat16']:.0f} GFLOP/s"
    )
    uc = measure_unit_costs(model, calib[: args.batch_size], args.device, args.micro_reps)
    log(
        f"unit costs on [{uc.batch}, {uc.tokens}] ({args.dtype}): block {1e3 * uc.block:.1f} ms; "
        f"head (norm+lm_head) all positions {1e3 * uc.head_all:.1f} ms = {uc.be(uc.head_all):.2f} blocks, "
        f"last {1e3 * uc.head_last:.2f} ms = {uc.be(uc.head_last):.3f}; probe KL (kl_rows) all "
        f"{uc.be(uc.kl_all):.2f}, last {uc.be(uc.kl_last):.4f}; KL given base log-probs all "
        f"{uc.be(uc.kl_floor_all):.2f}, last {uc.be(uc.kl_floor_last):.4f}; full forward {1e3 * uc.forward:.0f} ms = {uc.be(uc.forward):.1f}; "
        f"naive KL last {uc.be(uc.naive_kl['last']):.3f}, all {uc.be(uc.naive_kl['all']):.2f} (block-equivalents)"
    )

    report: dict = {
        "machine": machine,
        "args": vars(args),
        "roofline_gflops": roof,
        "unit_costs": uc.__dict__,
    }
    report["cases"] = bench_cases(args, model, calib, uc, roof, log)
    if args.bf16:
        report["bf16"] = bench_bf16(args, model, calib, report["cases"], log)
    if args.sweep:
        report["sweep"] = bench_sweep(args, model, calib, log)
    if args.stability:
        report["stability"] = bench_stability(args, model, calib, log)
    report["loadavg_at_end"] = os.getloadavg()
    report["maxrss_mb_process"] = maxrss_mb()
    report["total_s"] = time.perf_counter() - t0
    log(
        f"load average start {load0}, end {report['loadavg_at_end']}; process maxrss "
        f"{report['maxrss_mb_process']:.0f} MB; total {report['total_s']:.0f} s"
    )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
