"""Calibration windows: default vendored text, .txt, .jsonl, and their errors."""

import json

import pytest
from tiny_models import tiny_tokenizer

from swapprune.calibration.windows import load_calibration
from swapprune.errors import SwappruneError

TOK = tiny_tokenizer()


def test_default_is_vendored_validation_text_and_deterministic():
    a = load_calibration(TOK, None, prompts=5, tokens=40, seed=1)
    b = load_calibration(TOK, None, prompts=5, tokens=40, seed=1)
    c = load_calibration(TOK, None, prompts=5, tokens=40, seed=2)
    assert a.input_ids.shape == (5, 40)
    assert (a.input_ids == b.input_ids).all() and not (a.input_ids == c.input_ids).all()
    assert (a.input_ids[:, 0] == TOK.bos_token_id).all()  # the tokenizer adds BOS by default
    assert a.describe()["source"] == "wikitext2-valid"


def test_txt_and_jsonl(tmp_path):
    txt = tmp_path / "t.txt"
    txt.write_text("abcdefghij " * 50)
    cal = load_calibration(TOK, str(txt), prompts=3, tokens=20)
    assert cal.input_ids.shape == (3, 20)
    jl = tmp_path / "p.jsonl"
    jl.write_text("\n".join(json.dumps({"text": "x" * n}) for n in (30, 40, 50)))
    cal = load_calibration(TOK, str(jl), prompts=2, tokens=25)
    assert cal.input_ids.shape == (2, 25)
    with pytest.raises(SwappruneError, match=r"p.jsonl:1: record 0 has 31 tokens"):
        load_calibration(TOK, str(jl), prompts=2, tokens=35)
    with pytest.raises(SwappruneError, match="3 records"):
        load_calibration(TOK, str(jl), prompts=4, tokens=10)


def test_errors(tmp_path):
    small = tmp_path / "s.txt"
    small.write_text("short text")
    with pytest.raises(SwappruneError, match="lower --prompts or --tokens"):
        load_calibration(TOK, str(small), prompts=2, tokens=50)
    with pytest.raises(SwappruneError, match="context"):
        load_calibration(TOK, None, prompts=2, tokens=300, max_positions=256)
    with pytest.raises(SwappruneError, match="not found"):
        load_calibration(TOK, str(tmp_path / "missing.txt"), prompts=2, tokens=8)
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"txt": "no"}\n')
    with pytest.raises(SwappruneError, match="'text' field"):
        load_calibration(TOK, str(bad), prompts=1, tokens=2)
