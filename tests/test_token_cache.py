"""The on-disk cache of token ids: equal to tokenizing, keyed on everything that matters, self-healing."""

from pathlib import Path

import pytest
from tiny_models import tiny_tokenizer

from swapprune.calibration import tokens as token_cache
from swapprune.calibration.windows import load_calibration, vendored_text

TEXT = "The quick brown fox jumps over the lazy dog.\n" * 40


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SWAPPRUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SWAPPRUNE_TOKEN_CACHE", "1")
    return tmp_path / "cache" / "tokens"


def entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.npz")) if cache.exists() else []


def refuse_to_tokenize(monkeypatch, tok) -> None:
    def fail(*a, **k):
        raise AssertionError("tokenized although the ids were cached")

    monkeypatch.setattr(type(tok), "__call__", fail)


@pytest.mark.parametrize("special", [False, True])
def test_cached_ids_equal_tokenizer_ids(cache, monkeypatch, special):
    tok = tiny_tokenizer()
    direct = tok(TEXT, add_special_tokens=special).input_ids
    first = token_cache.encode(tok, TEXT, add_special_tokens=special)
    assert first == direct and len(entries(cache)) == 1
    refuse_to_tokenize(monkeypatch, tok)
    assert token_cache.encode(tok, TEXT, add_special_tokens=special) == direct


def test_key_covers_text_flag_and_tokenizer(cache):
    tok = tiny_tokenizer()
    token_cache.encode(tok, TEXT, add_special_tokens=False)
    token_cache.encode(tok, TEXT, add_special_tokens=True)
    token_cache.encode(tok, TEXT + "x", add_special_tokens=False)
    other = tiny_tokenizer()
    other.add_tokens(["fox"])  # same class, different vocabulary
    ids = token_cache.encode(other, TEXT, add_special_tokens=False)
    assert ids == other(TEXT, add_special_tokens=False).input_ids
    assert ids != tok(TEXT, add_special_tokens=False).input_ids
    assert len(entries(cache)) == 4


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_damaged_entry_is_recomputed_and_rewritten(cache, damage):
    tok = tiny_tokenizer()
    direct = tok(TEXT, add_special_tokens=False).input_ids
    token_cache.encode(tok, TEXT, add_special_tokens=False)
    (entry,) = entries(cache)
    data = entry.read_bytes()
    entry.write_bytes(
        {"truncate": data[: len(data) // 2], "garbage": b"x" * 100, "empty": b""}[damage]
    )
    assert token_cache.encode(tok, TEXT, add_special_tokens=False) == direct
    assert entry.read_bytes() == data  # rewritten whole


def test_entry_of_another_key_is_not_used(cache):
    """A file under the right name but holding another key's ids (a prefix collision) is ignored."""
    tok = tiny_tokenizer()
    token_cache.encode(tok, "abc " * 50, add_special_tokens=False)
    (entry,) = entries(cache)
    key = token_cache._key(tok, TEXT, False)
    entry.rename(cache / f"{key[:32]}.npz")
    assert (
        token_cache.encode(tok, TEXT, add_special_tokens=False)
        == tok(TEXT, add_special_tokens=False).input_ids
    )


def test_off_switch_and_slow_tokenizers_write_nothing(cache, monkeypatch):
    tok = tiny_tokenizer()
    monkeypatch.setenv("SWAPPRUNE_TOKEN_CACHE", "0")
    assert token_cache.encode(tok, TEXT, False) == tok(TEXT, add_special_tokens=False).input_ids
    assert entries(cache) == []
    monkeypatch.setenv("SWAPPRUNE_TOKEN_CACHE", "1")
    monkeypatch.setattr(type(tok), "is_fast", property(lambda self: False))
    assert token_cache.encode(tok, TEXT, False) == tok(TEXT, add_special_tokens=False).input_ids
    assert entries(cache) == []


def test_unwritable_cache_does_not_fail(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SWAPPRUNE_CACHE", str(blocker))
    monkeypatch.setenv("SWAPPRUNE_TOKEN_CACHE", "1")
    tok = tiny_tokenizer()
    assert token_cache.encode(tok, TEXT, False) == tok(TEXT, add_special_tokens=False).input_ids


def test_calibration_windows_identical_with_and_without_cache(cache, monkeypatch):
    tok = tiny_tokenizer()
    text_len = len(vendored_text("wiki.valid.raw"))
    assert text_len > 1_000_000
    cold = load_calibration(tok, None, 8, 32, seed=3)
    warm = load_calibration(tok, None, 8, 32, seed=3)
    monkeypatch.setenv("SWAPPRUNE_TOKEN_CACHE", "0")
    off = load_calibration(tok, None, 8, 32, seed=3)
    assert len(entries(cache)) == 1
    assert cold.input_ids.equal(off.input_ids) and warm.input_ids.equal(off.input_ids)
