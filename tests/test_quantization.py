"""Weight quantization with optimum-quanto: in-memory model == reloaded model."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import tiny_ids, tiny_model, tiny_tokenizer

from swapprune.edit.quantization import (
    QuantizeConfig,
    load_quantized,
    quantize_model,
    save_quantized,
)
from swapprune.errors import SwappruneError


# int4 packing is slow on CPU (about 40 s on an idle 2-core machine): run with -m slow.
@pytest.mark.parametrize("scheme", ["int8", pytest.param("int4", marks=pytest.mark.slow)])
def test_quantize_round_trip(tmp_path, scheme):
    model = tiny_model("llama")
    ids = tiny_ids()
    with torch.no_grad():
        ref = model(ids).logits
    cfg = QuantizeConfig(scheme=scheme)
    rep = quantize_model(model, cfg)
    assert rep.quantized_modules == 6 * 7  # every projection of every block, not the LM head
    with torch.no_grad():
        quant = model(ids).logits
    assert not torch.equal(quant, ref)
    assert (quant - ref).abs().max() < 0.5 * ref.abs().max()
    out = tmp_path / "quantized"
    check = save_quantized(
        model, tiny_tokenizer(), out, config=cfg, provenance={"test": 1}, check_ids=ids
    )
    assert check["passed"]
    assert (out / "quanto_qmap.json").is_file() and (out / "tokenizer.json").is_file()
    assert "QuantizedModelForCausalLM.from_pretrained" in (out / "README.md").read_text()
    assert json.loads((out / "provenance.json").read_text())["quantize"]["scheme"] == scheme
    again, tok = load_quantized(out)
    assert tok is not None
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, quant, atol=1e-5, rtol=1e-5)


def test_unknown_scheme_fails_before_work():
    with pytest.raises(
        SwappruneError, match="unknown quantization scheme 'int3'.*known: int4, int8"
    ):
        QuantizeConfig(scheme="int3").check()


def test_save_refuses_existing_dir(tmp_path):
    model = tiny_model("llama")
    quantize_model(model, QuantizeConfig())
    (tmp_path / "q").mkdir()
    with pytest.raises(SwappruneError, match="exists"):
        save_quantized(model, None, tmp_path / "q", config=QuantizeConfig(), provenance={})
