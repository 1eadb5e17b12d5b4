"""What a landscape will cost, from the model's facts alone (before any weights load).

Work is counted as the evaluator runs it: per window batch one base capture,
then the shared-prefix walk of every set (``trie_blocks(L, n) / C(L, n)``
blocks per set on average, :func:`swapprune.select.landscape.trie_blocks`) and
the LM head at every scored position. Rounds after the first see at most the
rule's floor of survivors; the refinement sees the top-k and the criteria's
sets. Seconds come from floating-point work at the rates below, measured at one
thread on a CPU with AVX-512 bf16 (SmolLM2-135M: a block over 512 tokens in
14 ms in bfloat16 and 55 ms in float32; its LM head with the log-sum-exp in
0.11 s and 0.46 s). It is an estimate for the refusal line, not a promise.
"""

from __future__ import annotations

from math import comb

from swapprune.select.landscape import trie_blocks

#: Floating-point operations per second at one thread, by evaluation dtype.
RATES = {"bfloat16": 2.5e11, "float32": 6.5e10}
#: Sets the criteria add to the first round and the refinement.
CRITERIA_SETS = 10


def block_params(config: dict) -> float | None:
    """Parameters of one decoder block from a ``config.json`` dict (attention + gated MLP)."""
    h = config.get("hidden_size") or config.get("n_embd")
    if not h:
        return None
    heads = config.get("num_attention_heads") or config.get("n_head") or 1
    kv = config.get("num_key_value_heads") or heads
    hd = config.get("head_dim") or h // heads
    inter = config.get("intermediate_size") or config.get("n_inner") or 4 * h
    return 2.0 * h * heads * hd + 2.0 * h * kv * hd + 3.0 * h * inter


def estimate_seconds(facts, count: int, settings) -> dict[str, float] | None:
    """CPU seconds of each stage at one thread (``None`` when the facts lack the widths).

    Args:
        facts: :class:`~swapprune.model.facts.ModelFacts`.
        count: admissible sets.
        settings: :class:`~swapprune.studies.landscape.LandscapeSettings`.
    """
    config = dict(facts.config or {})
    params = block_params(config)
    vocab = config.get("vocab_size")
    hidden = config.get("hidden_size") or config.get("n_embd")
    if params is None or not vocab or not hidden:
        return None
    L, n = facts.num_layers, settings.budget
    per_set = trie_blocks(L, n) / comb(L, n)
    rule = settings.rule()
    screen = RATES["bfloat16" if settings.bf16_screening else "float32"]

    def stage(sets: int, windows: int, tokens: int, rate: float) -> float:
        block_tokens = (L + sets * per_set) * windows * tokens
        rows = (sets + 1) * windows * (tokens - 1)
        return (2 * params * block_tokens + 2 * hidden * vocab * rows) / rate

    out = {}
    left = count
    for r, (windows, tokens) in enumerate(settings.rounds):
        if r > 0 and left <= rule.top_k:
            break
        sets = left + (CRITERIA_SETS if r == 0 else 0)
        out[f"round {r}"] = stage(sets, windows, tokens, screen)
        left = min(left, rule.top_k if r == len(settings.rounds) - 1 else rule.floor)
    windows, tokens = settings.refine
    out["refine"] = stage(min(left, rule.top_k) + CRITERIA_SETS, windows, tokens, RATES["float32"])
    return out
