"""The GGUF conversion cache: bitwise the direct load, converted once, rebuilt when damaged.

The GGUF here is written by the test with the ``gguf`` package's writer: a
2-block Llama with Q4_1 and Q8_0 tensors (so de-quantization is exercised) and
a byte-level BPE vocabulary with control tokens and a chat template.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from swapprune.gguf import convert as gguf_cache
from swapprune.model import load as loading
from swapprune.model.facts import read_facts
from swapprune.model.load import load_model, resolve_source

TEXTS = ["the cat in the hat", "<|im_start|>hi there<|im_end|>", " a\nb  c", "héllo wörld"]


def write_tiny_gguf(
    path: Path,
    seed: int = 0,
    hidden: int = 64,
    ffn: int = 128,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
) -> Path:
    """A tiny llama GGUF: quantized weights (Q4_1, Q8_0), F32 norms, tied embeddings."""
    import gguf
    from gguf import GGMLQuantizationType as Q
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    rng = np.random.default_rng(seed)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "r e"]
    tokens = specials + list(bytes_to_unicode().values()) + [m.replace(" ", "") for m in merges]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_rope_dimension_count(hidden // heads)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(specials) + [1] * (len(tokens) - len(specials)))
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"
    )

    def tensor(name: str, shape: tuple[int, ...], qtype) -> None:
        data = rng.standard_normal(shape).astype(np.float32)
        data = 1 + 0.1 * data if len(shape) == 1 else 0.05 * data
        w.add_tensor(
            name, gguf.quants.quantize(data, qtype), raw_dtype=None if qtype == Q.F32 else qtype
        )

    kv = hidden // heads * kv_heads
    tensor("token_embd.weight", (len(tokens), hidden), Q.Q8_0)
    for i in range(layers):
        tensor(f"blk.{i}.attn_norm.weight", (hidden,), Q.F32)
        tensor(f"blk.{i}.attn_q.weight", (hidden, hidden), Q.Q4_1)
        tensor(f"blk.{i}.attn_k.weight", (kv, hidden), Q.Q4_1)
        tensor(f"blk.{i}.attn_v.weight", (kv, hidden), Q.Q4_1)
        tensor(f"blk.{i}.attn_output.weight", (hidden, hidden), Q.Q4_1)
        tensor(f"blk.{i}.ffn_norm.weight", (hidden,), Q.F32)
        tensor(f"blk.{i}.ffn_gate.weight", (ffn, hidden), Q.Q4_1)
        tensor(f"blk.{i}.ffn_up.weight", (ffn, hidden), Q.Q4_1)
        tensor(f"blk.{i}.ffn_down.weight", (hidden, ffn), Q.Q4_1)
    tensor("output_norm.weight", (hidden,), Q.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.Q4_1.gguf")


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("SWAPPRUNE_CACHE", str(root))
    monkeypatch.delenv("SWAPPRUNE_GGUF_CACHE", raising=False)
    return root


def direct(path: Path, dtype=torch.float32):
    """transformers' own GGUF load, without any swapprune code in the way."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
    return model.eval(), tok


def ids_for(model, n: int = 3, t: int = 17) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, model.config.vocab_size, (n, t), generator=g)


def assert_same_tokenizer(a, b) -> None:
    for text in TEXTS:
        assert a(text).input_ids == b(text).input_ids, text
        assert a.decode(a(text).input_ids) == b.decode(b(text).input_ids)
    for attr in ("bos_token", "eos_token", "pad_token", "unk_token", "chat_template"):
        assert getattr(a, attr) == getattr(b, attr), attr
    assert a.get_vocab() == b.get_vocab()
    assert a.all_special_tokens == b.all_special_tokens


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cached_conversion_is_bitwise_the_direct_load(tiny_gguf, cache, dtype):
    ref, ref_tok = direct(tiny_gguf, getattr(torch, dtype))
    model, tok, source = load_model(str(tiny_gguf), dtype=dtype, device="cpu", progress=False)

    assert source.gguf_file == tiny_gguf.name and source.gguf_path == tiny_gguf
    entry = Path(source.converted)
    assert entry.parent == cache / "gguf" and gguf_cache.entry_ok(entry)
    assert "quantization_config" not in json.loads((entry / "config.json").read_text())
    assert not getattr(model, "is_quantized", False)
    assert getattr(model, "hf_quantizer", None) is None

    ref_state, state = ref.state_dict(), model.state_dict()
    assert ref_state.keys() == state.keys()
    for name, t in ref_state.items():
        assert t.dtype == state[name].dtype and torch.equal(t, state[name]), name
    ids = ids_for(model)
    with torch.no_grad():
        assert torch.equal(ref(input_ids=ids).logits, model(input_ids=ids).logits)
    assert_same_tokenizer(ref_tok, tok)


def test_converted_once_then_read_without_parsing(tiny_gguf, cache, monkeypatch):
    _, _, first = load_model(str(tiny_gguf), progress=False)

    def fail(*a, **k):
        raise AssertionError("a warm load must not parse or convert the GGUF")

    import gguf

    monkeypatch.setattr(loading, "convert_gguf", fail)
    monkeypatch.setattr(gguf, "GGUFReader", fail)
    # A renamed copy of the same bytes reuses the entry: the key is the content.
    copy = tiny_gguf.parent / "renamed.gguf"
    copy.write_bytes(tiny_gguf.read_bytes())
    try:
        _, _, again = load_model(str(tiny_gguf), progress=False)
        _, _, renamed = load_model(str(copy), progress=False)
        facts = read_facts(resolve_source(str(copy)))  # the copy's config.json, no parse
    finally:
        copy.unlink()
    assert first.converted == again.converted == renamed.converted
    assert facts.num_layers == 2 and facts.model_type == "llama"
    assert sorted(p.name for p in (cache / "gguf").iterdir() if p.is_dir()) == [
        Path(first.converted).name
    ]


def _break_truncate(entry: Path) -> None:
    f = entry / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _break_flip(entry: Path) -> None:
    # Same size, mtime put back: only the content (and the ctime) changes.
    f = entry / "model.safetensors"
    st = f.stat()
    data = bytearray(f.read_bytes())
    data[-7] ^= 0x40
    f.write_bytes(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


def _break_no_marker(entry: Path) -> None:
    (entry / gguf_cache.MARKER).unlink()


def _break_stray_file(entry: Path) -> None:
    (entry / "model.safetensors.index.json").write_text("{}")


def _break_missing_file(entry: Path) -> None:
    (entry / "tokenizer.json").unlink()


@pytest.mark.parametrize(
    "damage",
    [_break_truncate, _break_flip, _break_no_marker, _break_stray_file, _break_missing_file],
)
def test_damaged_entry_is_rebuilt_not_used(tiny_gguf, cache, damage):
    ref, _ = direct(tiny_gguf)
    model, _, source = load_model(str(tiny_gguf), progress=False)
    entry = Path(source.converted)
    damage(entry)
    assert not gguf_cache.entry_ok(entry)

    model, _, again = load_model(str(tiny_gguf), progress=False)
    assert again.converted == source.converted and gguf_cache.entry_ok(entry)
    ids = ids_for(model)
    with torch.no_grad():
        assert torch.equal(ref(input_ids=ids).logits, model(input_ids=ids).logits)
    assert not [p for p in (cache / "gguf").iterdir() if ".partial-" in p.name]


def test_interrupted_conversion_leaves_no_entry(tiny_gguf, cache, monkeypatch):
    def crash(src, out, progress=True):
        (Path(out) / "config.json").write_text("{}")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        gguf_cache.converted_dir(tiny_gguf, crash, progress=False)
    assert not [p for p in (cache / "gguf").iterdir() if p.is_dir()]


def test_file_hash_is_memoised_by_stat(tmp_path, cache, monkeypatch):
    (cache / "gguf").mkdir(parents=True)
    f = tmp_path / "blob.bin"
    f.write_bytes(b"a" * 1000)
    reads = []
    real = gguf_cache._stream_sha256
    monkeypatch.setattr(gguf_cache, "_stream_sha256", lambda p: reads.append(p) or real(p))

    first = gguf_cache.file_sha256(f)
    assert gguf_cache.file_sha256(f) == first and len(reads) == 1
    st = f.stat()
    f.write_bytes(b"b" * 1000)  # same size, same mtime: the ctime still moves
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = gguf_cache.file_sha256(f)
    assert second != first and len(reads) == 2
    import hashlib

    assert second == hashlib.sha256(b"b" * 1000).hexdigest()


def test_cache_location(monkeypatch, tmp_path):
    monkeypatch.setenv("SWAPPRUNE_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gguf_cache.cache_root() == tmp_path / "explicit"
    monkeypatch.delenv("SWAPPRUNE_CACHE")
    assert gguf_cache.cache_root() == tmp_path / "xdg" / "swapprune"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert gguf_cache.cache_root() == tmp_path / "home" / ".cache" / "swapprune"


def test_unusable_cache_falls_back_to_the_direct_load(tiny_gguf, tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("SWAPPRUNE_CACHE", str(blocker))
    ref, _ = direct(tiny_gguf)
    model, _, source = load_model(str(tiny_gguf), progress=False)
    assert source.converted is None and source.gguf_file == tiny_gguf.name
    assert "loading the GGUF file directly" in capsys.readouterr().err
    ids = ids_for(model)
    with torch.no_grad():
        assert torch.equal(ref(input_ids=ids).logits, model(input_ids=ids).logits)


@pytest.mark.slow
def test_real_gguf_cache_is_bitwise_the_direct_load(tmp_path, monkeypatch):
    """SmolLM2-135M (the demo GGUF): cached copy == direct load, logits and tokenizer."""
    from swapprune.model.load import resolve_source

    monkeypatch.setenv("SWAPPRUNE_CACHE", str(tmp_path / "cache"))
    path = resolve_source("smollm2-135m").gguf_path
    ref, ref_tok = direct(path)
    model, tok, source = load_model("smollm2-135m", device="cpu", progress=False)
    assert source.converted and source.gguf_file == path.name
    ids = ids_for(model, n=2, t=24)
    with torch.no_grad():
        assert torch.equal(ref(input_ids=ids).logits, model(input_ids=ids).logits)
    assert_same_tokenizer(ref_tok, tok)
    assert tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False
    ) == ref_tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)


def test_facts_come_from_the_header_then_from_the_copy(tiny_gguf, cache, monkeypatch):
    src = resolve_source(str(tiny_gguf))
    cold = read_facts(src)  # no entry yet: the GGUF header, and no conversion
    assert (cold.num_layers, cold.context_length, cold.hidden_size) == (2, 128, 64)
    assert not (cache / "gguf").exists() or not [
        p for p in (cache / "gguf").iterdir() if p.is_dir()
    ]
    load_model(str(tiny_gguf), progress=False)
    import gguf

    def fail(*a, **k):
        raise AssertionError("with a converted copy the header is not parsed")

    monkeypatch.setattr(gguf, "GGUFReader", fail)
    warm = read_facts(src)
    assert (warm.num_layers, warm.context_length, warm.hidden_size) == (2, 128, 64)


def test_concurrent_first_loads_convert_once(tiny_gguf, cache, monkeypatch):
    import threading

    calls = []
    real = loading.convert_gguf

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    entries: list[Path] = []
    threads = [
        threading.Thread(
            target=lambda: entries.append(
                gguf_cache.converted_dir(tiny_gguf, counted, progress=False)
            )
        )
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(entries) == 2 and entries[0] == entries[1]
    assert gguf_cache.entry_ok(entries[0])
