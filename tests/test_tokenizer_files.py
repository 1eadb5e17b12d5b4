"""The saved tokenizer loads with ``AutoTokenizer`` in transformers 4.x as well as 5.x.

transformers 5 saves a plain ``tokenizers`` tokenizer as class ``TokenizersBackend``, which
4.x does not have. The checkpoint names ``PreTrainedTokenizerFast`` instead (both have it).
Where a transformers 4 interpreter is at hand (``SWAPPRUNE_TRANSFORMERS4_PYTHON``, e.g. a
venv with ``pip install 'transformers==4.57.*'``; no torch needed), the files are also
loaded there and must give the same token ids.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from tiny_models import tiny_model, tiny_tokenizer
from transformers import AutoTokenizer

from swapprune.output.checkpoint import save_checkpoint
from swapprune.output.tokenizer_files import PORTABLE, portable_tokenizer_config
from swapprune.plan import PrunePlan

TEXT = "The saved tokenizer loads anywhere."


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt") / "pruned"
    tok = tiny_tokenizer()
    plan = PrunePlan.from_removal(6, [2])
    from swapprune.edit.surgery import apply_plan

    model = apply_plan(tiny_model("llama"), plan, log=lambda *_: None)
    save_checkpoint(model, tok, plan, out, provenance={}, base_model_id="tiny")
    return out, tok


def test_the_class_named_is_one_both_majors_have(checkpoint):
    out, _ = checkpoint
    config = json.loads((out / "tokenizer_config.json").read_text())
    # What transformers 4 reads first: the class name, looked up among its own classes.
    assert config["tokenizer_class"] not in PORTABLE
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (out / "tokenizer.json").is_file()  # the file PreTrainedTokenizerFast reads


def test_transformers_5_loads_it_the_same(checkpoint):
    out, tok = checkpoint
    again = AutoTokenizer.from_pretrained(out)
    assert again(TEXT).input_ids == tok(TEXT).input_ids
    assert (again.bos_token, again.eos_token, again.pad_token) == (
        tok.bos_token,
        tok.eos_token,
        tok.pad_token,
    )


def test_a_model_specific_class_is_left_alone(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "Qwen2Tokenizer"})
    )
    assert portable_tokenizer_config(tmp_path) is None
    assert portable_tokenizer_config(tmp_path / "absent") is None


@pytest.mark.skipif(
    not os.environ.get("SWAPPRUNE_TRANSFORMERS4_PYTHON"),
    reason="set SWAPPRUNE_TRANSFORMERS4_PYTHON to a python with transformers 4.x",
)
def test_transformers_4_loads_it(checkpoint):
    out, tok = checkpoint
    python = os.environ["SWAPPRUNE_TRANSFORMERS4_PYTHON"]
    code = (
        "import json, sys, transformers; from transformers import AutoTokenizer; "
        "t = AutoTokenizer.from_pretrained(sys.argv[1]); "
        "print(json.dumps([transformers.__version__, t(sys.argv[2]).input_ids]))"
    )
    done = subprocess.run([python, "-c", code, str(out), TEXT], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    version, ids = json.loads(done.stdout.strip().splitlines()[-1])
    assert version.startswith("4.")
    assert ids == tok(TEXT).input_ids
