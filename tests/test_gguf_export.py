"""Pruned GGUF output: byte copies, trimmed metadata, a reload equal to the in-memory cut.

The sources are tiny Llama-like and Gemma-3-like GGUFs written in the test
(``tests/tiny_gguf.py``): Q8_0 / Q4_0 / F16 / F32 tensors, a byte-level BPE
vocabulary, and for Llama two arch-prefixed arrays of the block count's length,
one per layer and one not.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from tiny_gguf import write_tiny_gguf

from swapprune.errors import SwappruneError
from swapprune.gguf.check import gguf_selfcheck, load_gguf_model, pruned_reference
from swapprune.gguf.writer import check_source, gguf_metadata, read_gguf, write_pruned_gguf
from swapprune.output.checkpoint import SelfCheckError
from swapprune.plan import PrunePlan
from swapprune.serving.phase import eligible_removals, in_phase, phase_rule
from swapprune.serving.view import serving_view

CASES = {
    # arch: (layers, removed). Gemma-3's cut keeps its period-6 pattern in phase.
    "llama": (4, [1]),
    "gemma3": (8, [6, 7]),
}


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("src")
    return {a: write_tiny_gguf(root / f"{a}.gguf", a, n) for a, (n, _) in CASES.items()}


@pytest.fixture(scope="module")
def pruned(sources, tmp_path_factory):
    """arch -> (plan, in-memory reference, pruned path, record), written once with the self-check."""
    out = tmp_path_factory.mktemp("out")
    result = {}
    for arch, (n, removed) in CASES.items():
        plan = PrunePlan.from_removal(n, removed)
        ref = pruned_reference(sources[arch], plan)
        path = out / f"{arch}-pruned.gguf"
        rec = write_pruned_gguf(sources[arch], plan, path, check=gguf_selfcheck(ref))
        result[arch] = (plan, ref, path, rec)
    return result


def _no_partials(directory: Path) -> bool:
    return not [p for p in directory.iterdir() if ".partial-" in p.name]


@pytest.mark.parametrize("arch", CASES)
def test_kept_tensors_are_byte_identical(arch, sources, pruned):
    plan, _, path, rec = pruned[arch]
    src, out = read_gguf(sources[arch]), read_gguf(path)
    old = {t.name: t for t in src.tensors}
    new_to_old = {new: old_i for new, old_i in enumerate(plan.kept)}
    names = []
    for t in out.tensors:
        m = re.fullmatch(r"blk\.(\d+)\.(.+)", t.name)
        name = f"blk.{new_to_old[int(m.group(1))]}.{m.group(2)}" if m else t.name
        names.append(name)
        s = old[name]
        assert t.tensor_type == s.tensor_type, t.name
        assert list(t.shape) == list(s.shape), t.name
        assert t.data.tobytes() == s.data.tobytes(), t.name
    removed = {n for n in old if re.match(rf"blk\.({'|'.join(map(str, plan.removed))})\.", n)}
    assert sorted(names) == sorted(set(old) - removed)
    assert rec.tensors_after == len(out.tensors) and rec.bytes_after == path.stat().st_size
    assert rec.bytes_after < rec.bytes_before and rec.blocks_after == len(plan.kept)
    assert {"Q4_0", "Q8_0", "F32"} <= set(rec.tensor_types)


@pytest.mark.parametrize("arch", CASES)
def test_metadata_follows_the_new_depth(arch, sources, pruned):
    plan, _, path, rec = pruned[arch]
    old_n, new_n = CASES[arch][0], len(plan.kept)
    src, out = read_gguf(sources[arch]), read_gguf(path)
    before, after = gguf_metadata(src, tokenizer=True), gguf_metadata(out, tokenizer=True)
    assert after[f"{arch}.block_count"] == new_n
    assert set(after) == set(before)
    for key, value in after.items():
        if isinstance(value, list) and key.startswith(f"{arch}.") and len(before[key]) == old_n:
            if key.endswith("rope.dimension_sections"):
                assert value == before[key]  # never per layer
            else:
                assert len(value) == new_n, key
        elif key != f"{arch}.block_count":
            assert value == before[key], key
    for key in after:
        assert out.fields[key].types == src.fields[key].types, key
    if arch == "llama":
        assert after["llama.test.layer_ids"] == plan.kept
        assert rec.trimmed_keys == ["llama.test.layer_ids"]


@pytest.mark.parametrize("arch", CASES)
def test_reload_equals_the_in_memory_pruned_model(arch, pruned):
    plan, ref, path, rec = pruned[arch]
    check = rec.selfcheck
    assert check["passed"] and check["logits_exact"] and check["logits_max_abs_diff"] == 0.0
    reloaded = load_gguf_model(path)
    assert reloaded.config.num_hidden_layers == len(plan.kept)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, reloaded.config.vocab_size, (2, 24), generator=g)
    with torch.no_grad():
        assert torch.equal(reloaded(input_ids=ids).logits, ref(input_ids=ids).logits)
    kw = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=2)
    cached = reloaded.generate(ids[:1, :8], use_cache=True, **kw)
    uncached = reloaded.generate(ids[:1, :8], use_cache=False, **kw)
    assert torch.equal(cached, uncached)


def test_tokenizer_and_chat_template_survive(sources, pruned):
    from transformers import AutoTokenizer

    path = pruned["llama"][2]
    a = AutoTokenizer.from_pretrained(str(sources["llama"].parent), gguf_file="llama.gguf")
    b = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    assert a.get_vocab() == b.get_vocab() and a.chat_template == b.chat_template
    assert a("the cat in the hat").input_ids == b("the cat in the hat").input_ids


def test_gemma3_cut_out_of_phase_is_flagged_and_not_written(sources, tmp_path):
    n = CASES["gemma3"][0]
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)]
    plan = PrunePlan.from_removal(n, [2])  # the full-attention layer 5 moves to slot 4
    kept_types = [types[i] for i in plan.kept]
    meta = gguf_metadata(read_gguf(sources["gemma3"]))
    meta["gemma3.block_count"] = len(plan.kept)
    view = serving_view(meta, kept_types, kept=plan.kept, num_layers_before=n)
    for runtime in ("transformers-gguf", "llama.cpp"):
        flips = [
            (ly.index, ly.original, ly.own, ly.served) for ly in view.runtimes[runtime].differs
        ]
        assert flips == [
            (4, 5, "full_attention", "sliding_attention"),
            (5, 6, "sliding_attention", "full_attention"),
        ], runtime
    assert "llama.cpp serves 2 layer(s) with another type: 4 (orig 5) F->S" in view.warning()
    assert "\n" not in view.warning()
    card = view.markdown()
    assert "| 4 | 5 | F | **S (4)** | **S (4)** |" in card
    assert "| 5 | 6 | S | **F** | **F** |" in card

    rule = phase_rule("gemma3_text", "llama.cpp", meta)
    assert not in_phase(types, plan.removed, rule)
    assert list(eligible_removals(types, 1, rule)) == [(7,), (6,)]
    assert list(eligible_removals(types, 2, rule)) == [(6, 7)]

    ref = pruned_reference(sources["gemma3"], plan)
    out = tmp_path / "broken.gguf"
    with pytest.raises(SelfCheckError, match="derives this GGUF's layer types") as e:
        write_pruned_gguf(sources["gemma3"], plan, out, check=gguf_selfcheck(ref))
    assert "\n" not in str(e.value)
    assert not out.exists() and _no_partials(tmp_path)


def test_self_check_catches_other_weights(sources, tmp_path):
    """A file whose blocks are not the reference's (here: another block removed) is refused."""
    wrong = pruned_reference(sources["llama"], PrunePlan.from_removal(4, [2]))
    out = tmp_path / "bad.gguf"
    with pytest.raises(SelfCheckError, match="logits differ from the in-memory pruned model"):
        write_pruned_gguf(
            sources["llama"], PrunePlan.from_removal(4, [1]), out, check=gguf_selfcheck(wrong)
        )
    assert not out.exists() and _no_partials(tmp_path)


def _one_line_nothing_written(tmp_path: Path, source: Path, plan: PrunePlan, match: str) -> None:
    out = tmp_path / "out" / "model.gguf"
    with pytest.raises(SwappruneError, match=match) as e:
        write_pruned_gguf(source, plan, out)
    assert "\n" not in str(e.value)
    assert not out.exists()
    assert not out.parent.exists() or not list(out.parent.iterdir())


@pytest.mark.parametrize("keep_fraction", [0.5, 0.999])
def test_truncated_gguf_is_refused(sources, tmp_path, keep_fraction):
    data = sources["llama"].read_bytes()
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(data[: int(len(data) * keep_fraction)])
    _one_line_nothing_written(
        tmp_path, bad, PrunePlan.from_removal(4, [1]), "truncated|not a readable GGUF"
    )


def test_not_a_gguf_is_refused(tmp_path):
    bad = tmp_path / "junk.gguf"
    bad.write_bytes(b"GGML" + b"\0" * 64)
    _one_line_nothing_written(tmp_path, bad, PrunePlan.from_removal(4, [1]), "not a readable GGUF")


def test_unknown_architecture_is_refused(tmp_path):
    import gguf

    path = tmp_path / "falcon.gguf"
    w = gguf.GGUFWriter(str(path), "falcon")
    w.add_block_count(2)
    w.add_tensor("blk.0.attn_norm.weight", torch.ones(8).numpy())
    w.add_tensor("blk.1.attn_norm.weight", torch.ones(8).numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    _one_line_nothing_written(
        tmp_path, path, PrunePlan.from_removal(2, [1]), "does not support architecture 'falcon'"
    )
    with pytest.raises(SwappruneError, match="'falcon'"):
        check_source(path)


def test_tensors_beyond_the_block_count_are_refused(tmp_path):
    import gguf

    path = tmp_path / "inconsistent.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    for i in range(3):
        w.add_tensor(f"blk.{i}.attn_norm.weight", torch.ones(8).numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    _one_line_nothing_written(
        tmp_path, path, PrunePlan.from_removal(2, [1]), "beyond llama.block_count"
    )


def test_merge_plan_is_refused(sources, tmp_path):
    plan = PrunePlan.from_merges(4, {1: [2]}, merge="average")
    _one_line_nothing_written(tmp_path, sources["llama"], plan, "removal plans only")


def test_plan_for_another_depth_is_refused(sources, tmp_path):
    _one_line_nothing_written(
        tmp_path, sources["llama"], PrunePlan.from_removal(6, [1]), "plan is for 6 blocks"
    )


def test_existing_output_and_the_source_itself_are_refused(sources, pruned, tmp_path):
    plan, _, path, _ = pruned["llama"]
    before = path.read_bytes()
    with pytest.raises(SwappruneError, match="exists"):
        write_pruned_gguf(sources["llama"], plan, path)
    with pytest.raises(SwappruneError, match="is the source"):
        write_pruned_gguf(sources["llama"], plan, sources["llama"], overwrite=True)
    assert path.read_bytes() == before


def test_sliding_layers_list_is_written_for_llama_cpp(sources, tmp_path):
    """The per-layer list llama.cpp b11434 reads; transformers' GGUF loader still ignores it."""
    n = CASES["gemma3"][0]
    plan = PrunePlan.from_removal(n, [2])
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)]
    kept_types = [types[i] for i in plan.kept]
    rec = write_pruned_gguf(
        sources["gemma3"],
        plan,
        tmp_path / "listed.gguf",
        sliding_layers=[t == "sliding_attention" for t in kept_types],
    )
    meta = gguf_metadata(read_gguf(rec.path))
    assert meta["gemma3.attention.sliding_window_pattern"] == [True] * 4 + [False, True, True]
    view = serving_view(meta, kept_types, kept=plan.kept)
    assert not view.runtimes["llama.cpp"].differs
    assert [ly.index for ly in view.runtimes["transformers-gguf"].differs] == [4, 5]
    assert not phase_rule("gemma3_text", "llama.cpp", meta).constrains
    with pytest.raises(SwappruneError, match="sliding_layers has 2 entries"):
        write_pruned_gguf(sources["gemma3"], plan, tmp_path / "x.gguf", sliding_layers=[True] * 2)


@pytest.mark.slow
def test_real_smollm2_gguf_prunes_byte_for_byte_and_reloads_exactly(tmp_path):
    """SmolLM2-135M Q4_1 (the demo GGUF), 8 of 30 blocks removed."""
    from swapprune.model.load import resolve_source

    src = resolve_source("smollm2-135m").gguf_path
    plan = PrunePlan.from_removal(30, [3, 5, 8, 11, 14, 17, 20, 26])
    ref = pruned_reference(src, plan)
    rec = write_pruned_gguf(src, plan, tmp_path / "model.gguf", check=gguf_selfcheck(ref))
    assert rec.selfcheck["logits_exact"] and rec.selfcheck["generate_cache_equal"]
    assert rec.blocks_after == 22 and rec.tensors_after == rec.tensors_before - 8 * 9
    assert rec.tensor_types.get("Q4_1") and rec.bytes_after < 0.85 * rec.bytes_before
    old = {t.name: t for t in read_gguf(src).tensors}
    for t in read_gguf(rec.path).tensors:
        m = re.fullmatch(r"blk\.(\d+)\.(.+)", t.name)
        name = f"blk.{plan.kept[int(m.group(1))]}.{m.group(2)}" if m else t.name
        assert t.data.tobytes() == old[name].data.tobytes(), t.name
