"""Study v4's n = 8 reference: a search, not the optimum (PLAN.md, "n = 8").

A width-3 beam over every removable block, scored by the perplexity of the pruned model
on held-out windows of seed 0's calibration text (8 x 128 tokens), then first-improvement
local search on longer held-out windows (8 x 512): move one removed block by +-1 or +-2
(onto a kept block) until no move lowers the perplexity. Both rank sets only, so they run
on a bfloat16 copy of the model; the set found is evaluated in float32 on the contracts
like every other cut.
"""

from __future__ import annotations

from pathlib import Path

BEAM_WINDOWS, BEAM_TOKENS = 8, 128
LOCAL_WINDOWS, LOCAL_TOKENS = 8, 512
WIDTH = 3
SEED = 17  # the held-out pick: clear of the cuts' own held-out windows (seed 0, +1)


def _windows(tok, source: Path, prompts: int, tokens: int, seed: int, avoid):
    from swapprune.calibration.heldout import heldout_windows

    return heldout_windows(tok, str(source), prompts, tokens, seed, avoid)


def moves(removed: tuple[int, ...], num_layers: int) -> list[tuple[int, ...]]:
    """Every set with one removed block moved by +-1 or +-2 onto a kept block (pure)."""
    have = set(removed)
    out = []
    for b in removed:
        for d in (-2, -1, 1, 2):
            t = b + d
            if 0 <= t < num_layers and t not in have:
                s = tuple(sorted((have - {b}) | {t}))
                if s not in out:
                    out.append(s)
    return out


def local_search(start: tuple[int, ...], cost, num_layers: int, max_rounds: int = 20):
    """First-improvement descent over :func:`moves`; returns ``(set, cost, calls, rounds)``."""
    best, best_cost, calls, rounds = start, cost(start), 1, 0
    improved = True
    while improved and rounds < max_rounds:
        improved, rounds = False, rounds + 1
        for s in moves(best, num_layers):
            c = cost(s)
            calls += 1
            if c < best_cost:
                best, best_cost, improved = s, c, True
                break
    return best, best_cost, calls, rounds


def search_reference(model, tok, budget: int, source: Path) -> dict:
    from swapprune.calibration.windows import load_calibration
    from swapprune.engine.exhaustive import low_precision_copy
    from swapprune.engine.oracle import CalibrationOracle
    from swapprune.select.search import beam_over

    scoring = load_calibration(tok, str(source), 16, 64, 0)  # the cuts' calibration windows
    beam_w = _windows(tok, source, BEAM_WINDOWS, BEAM_TOKENS, SEED, [scoring])
    local_w = _windows(tok, source, LOCAL_WINDOWS, LOCAL_TOKENS, SEED + 1, [scoring, beam_w])
    low = low_precision_copy(model).eval()
    beam_oracle = CalibrationOracle(low, beam_w.input_ids, 8, "ppl")
    L = beam_oracle.L
    found, notes = beam_over(list(range(L)), budget, beam_oracle.cost, WIDTH, 10**6)
    local_oracle = CalibrationOracle(low, local_w.input_ids, 8, "ppl")
    best, cost, calls, rounds = local_search(tuple(found), local_oracle.cost, L)
    return {
        "set": list(best),
        "beam_set": list(found),
        "beam_calls": notes["calls"],
        "local_calls": calls,
        "local_rounds": rounds,
        "local_ppl_bf16": cost,
        "windows": {"beam": [BEAM_WINDOWS, BEAM_TOKENS], "local": [LOCAL_WINDOWS, LOCAL_TOKENS]},
        "label": "search reference (beam width 3, then local search): not the optimum",
    }
