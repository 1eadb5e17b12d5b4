"""The serving view (what each runtime does with each kept layer) and the in-phase constraint.

Pure: hand-written configs and GGUF metadata dicts, no model.
"""

from __future__ import annotations

from itertools import combinations

import pytest

from swapprune.errors import SwappruneError
from swapprune.serving.phase import (
    check_feasible,
    count_in_phase,
    describe_eligible,
    eligible_removals,
    feasible_budgets,
    in_phase,
    phase_predicate,
    phase_rule,
)
from swapprune.serving.rules import RUNTIMES, SERVING
from swapprune.serving.view import FULL, SLIDING, serving_view

S, F = SLIDING, FULL


def period_types(n: int, p: int) -> list[str]:
    return [F if (i + 1) % p == 0 else S for i in range(n)]


def kept_of(n: int, removed: list[int]) -> list[int]:
    return [i for i in range(n) if i not in removed]


def hf_config(model_type: str, types: list[str], **extra) -> dict:
    return {
        "model_type": model_type,
        "num_hidden_layers": len(types),
        "layer_types": types,
        "sliding_window": 512,
        **extra,
    }


def test_every_family_of_the_architecture_table_has_rules_with_sources():
    from swapprune.model.arch import ARCHITECTURES

    required = set(ARCHITECTURES) | {
        "gemma2",
        "gemma3_text",
        "cohere2",
        "olmo2",
        "gpt_oss",
        "qwen2",
    }
    assert required <= set(SERVING)
    for family in SERVING.values():
        assert set(family.rules) <= set(RUNTIMES) and "transformers" in family.rules
        for rule in family.rules.values():
            assert rule.source.version and rule.source.file, family.model_type
            assert rule.derive in ("period", "leading_full", "uniform", "none")
            assert (rule.derive == "period") == (rule.period is not None)


def test_gemma3_checkpoint_cut_out_of_phase_in_llama_cpp_only():
    types = period_types(12, 6)
    removed = [3]
    kept = kept_of(12, removed)
    kept_types = [types[i] for i in kept]
    view = serving_view(hf_config("gemma3_text", kept_types), kept_types, kept=kept)
    assert not view.runtimes["transformers"].differs and not view.runtimes["vllm"].differs
    flips = [(ly.original, ly.served) for ly in view.runtimes["llama.cpp"].differs]
    assert flips == [(5, S), (6, F), (11, S)]
    assert view.runtimes["llama.cpp"].layers[4].window == 512  # orig 5 gets the window
    assert "after llama.cpp's convert_hf_to_gguf.py" in view.runtimes["llama.cpp"].notes[0]
    assert view.warning().startswith("serving: llama.cpp serves 3 layer(s)")


def test_in_phase_cut_has_no_warning_in_any_runtime():
    types = period_types(12, 6)
    kept = kept_of(12, [10, 11])
    kept_types = [types[i] for i in kept]
    view = serving_view(hf_config("gemma3_text", kept_types), kept_types, kept=kept)
    assert view.warning() is None


def test_llama_cpp_reads_a_per_layer_list_in_the_gguf():
    """A Cohere2 GGUF carrying the list (trimmed by the writer) is served with the kept types."""
    types = period_types(8, 4)
    kept = kept_of(8, [0])
    kept_types = [types[i] for i in kept]
    meta = {
        "general.architecture": "cohere2",
        "cohere2.block_count": 7,
        "cohere2.attention.sliding_window": 4096,
        "cohere2.attention.sliding_window_pattern": [t == S for t in kept_types],
    }
    assert serving_view(meta, kept_types).warning() is None
    del meta["cohere2.attention.sliding_window_pattern"]
    view = serving_view(meta, kept_types)
    assert [ly.index for ly in view.runtimes["llama.cpp"].differs] == [2, 3, 6]
    assert phase_rule("cohere2", "llama.cpp", meta).constrains
    meta["cohere2.attention.sliding_window_pattern"] = [True] * 7
    assert not phase_rule("cohere2", "llama.cpp", meta).constrains


def test_gpt_oss_vllm_hard_codes_even_layers():
    types = period_types(6, 2)
    kept = kept_of(6, [0])
    kept_types = [types[i] for i in kept]
    view = serving_view(hf_config("gpt_oss", kept_types), kept_types, kept=kept)
    assert not view.runtimes["transformers"].differs
    assert len(view.runtimes["vllm"].differs) == 5  # every kept layer flips
    assert not phase_rule("gpt_oss", "transformers").constrains
    rule = phase_rule("gpt_oss", "vllm")
    assert in_phase(types, [4, 5], rule) and not in_phase(types, [0], rule)


def test_qwen2_mixed_layers_are_refused_by_vllm():
    types = [F, F, S, S]
    config = hf_config("qwen2", types, use_sliding_window=True, max_window_layers=2)
    view = serving_view(config, types)
    assert view.runtimes["vllm"].refused and "vllm refuses" in view.warning()
    rule = phase_rule("qwen2", "vllm", config)
    assert [list(s) for s in eligible_removals(types, 2, rule)] == [[2, 3], [0, 1]]


def test_gemma_attention_scale_by_layer_count():
    types = period_types(62, 6)
    kept = kept_of(62, [60, 61])
    meta = {"general.architecture": "gemma3", "gemma3.block_count": 60}
    meta["gemma3.attention.sliding_window"] = 1024
    view = serving_view(meta, [types[i] for i in kept], num_layers_before=62)
    assert "attention scale by layer count" in view.runtimes["llama.cpp"].warnings[0]
    assert "62 -> 60" in view.warning()


def test_families_without_a_pattern_never_warn():
    view = serving_view(
        {"model_type": "mistral", "num_hidden_layers": 3, "sliding_window": 4096}, [F] * 3
    )
    assert view.warning() is None
    assert "with or without the cut" in view.runtimes["llama.cpp"].notes[-1]
    unknown = serving_view({"model_type": "mamba", "num_hidden_layers": 2}, [F, F])
    assert not unknown.known and unknown.warning() is None
    assert "no runtime rules" in unknown.markdown()[0]


@pytest.mark.parametrize("period,n", [(6, 13), (2, 9), (4, 10)])
def test_counts_and_listing_equal_brute_force(period, n):
    types = period_types(n, period)
    rule = phase_rule({2: "gemma2", 4: "cohere2", 6: "gemma3_text"}[period], "llama.cpp")
    assert rule.constrains
    ok = phase_predicate(types, rule)
    for b in range(n):
        for protected in ((), (n - 1,)):
            brute = [c for c in combinations(range(n), b) if ok(c) and not set(c) & set(protected)]
            assert count_in_phase(types, b, rule, protected) == len(brute), (b, protected)
            assert sorted(eligible_removals(types, b, rule, protected)) == brute
    assert list(eligible_removals(types, 2, rule, limit=1)) == [brute_first(types, 2, rule)]


def brute_first(types, b, rule):
    n = len(types)
    # the first set in the listing keeps the lexicographically smallest kept list
    sets = [c for c in combinations(range(n), b) if in_phase(types, c, rule)]
    return min(sets, key=lambda c: [i for i in range(n) if i not in c])


def test_predicate_agrees_with_the_serving_view():
    types = period_types(12, 6)
    rule = phase_rule("gemma3_text", "llama.cpp")
    for removed in combinations(range(12), 2):
        kept = kept_of(12, list(removed))
        kept_types = [types[i] for i in kept]
        view = serving_view(hf_config("gemma3_text", kept_types), kept_types)
        assert in_phase(types, removed, rule) == (not view.runtimes["llama.cpp"].differs)


def test_infeasible_budget_is_one_line_before_any_work():
    types = period_types(12, 6)
    rule = phase_rule("gemma3_text", "llama.cpp")
    with pytest.raises(SwappruneError) as e:
        check_feasible(types, 3, rule, protected=[11])
    msg = str(e.value)
    assert (
        "\n" not in msg and "no removal of 3 of 12 blocks" in msg and "budgets that can: 6" in msg
    )
    assert feasible_budgets(types, rule, protected=[11]) == [6]
    assert check_feasible(types, 2, rule) == 5
    assert "5 of 66 removal sets of 2" in describe_eligible(types, 2, rule)


def test_several_runtimes_must_all_be_in_phase():
    types = period_types(6, 2)
    gemma2 = phase_rule("gemma2", "llama.cpp")
    assert count_in_phase(
        types, 2, [gemma2, phase_rule("gemma2", "transformers")]
    ) == count_in_phase(types, 2, gemma2)
    with pytest.raises(SwappruneError, match="unknown serving runtime 'llama-cpp'"):
        phase_rule("gemma2", "llama-cpp")
