"""Start-up cost: light modules import no heavy library, and task names resolve without lm-eval."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from swapprune.errors import SwappruneError
from swapprune.evaluation import names
from swapprune.evaluation.names import PACK_DIR, PACK_TAGS, PACK_TASKS, resolve_tasks

HEAVY = ("torch", "transformers", "lm_eval", "numpy", "gguf", "safetensors")
LIGHT = (
    "swapprune",
    "swapprune.errors",
    "swapprune.output.artifacts",
    "swapprune.model.load",
    "swapprune.gguf.convert",
    "swapprune.plan",
    "swapprune.evaluation",
    "swapprune.evaluation.names",
)


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_light_modules_import_no_heavy_library():
    loaded = _run(f"""
        import sys
        for m in {LIGHT!r}:
            __import__(m)
        print(sorted(m for m in {HEAVY!r} if m in sys.modules))
    """)
    assert loaded.strip() == "[]"


def test_task_names_resolve_without_lm_eval():
    out = _run("""
        import sys
        from swapprune.errors import SwappruneError
        from swapprune.evaluation import resolve_tasks
        print(resolve_tasks(["piqa", "swapprune_zeroshot", "wikitext2_ppl", "hellaswag"]))
        try:
            resolve_tasks(["piqaa"])
        except SwappruneError as e:
            print(e)
        print("lm_eval" in sys.modules)
    """).splitlines()
    assert out[0] == str(
        ["swapprune_piqa", "swapprune_zeroshot", "swapprune_wikitext2_ppl", "hellaswag"]
    )
    assert "did you mean 'piqa'" in out[1]
    assert out[2] == "False"


def test_static_pack_names_match_the_yamls():
    tasks, tags = set(), set()
    for f in PACK_DIR.glob("*.yaml"):
        text = f.read_text()
        tasks.update(re.findall(r"(?m)^task:\s*(\S+)", text))
        for block in re.findall(r"(?m)^tag:\s*\n((?:\s+-\s*\S+\n?)+)", text):
            tags.update(re.findall(r"-\s*(\S+)", block))
    assert tasks == set(PACK_TASKS) and tags == set(PACK_TAGS)


def test_static_pack_names_match_lm_eval_index():
    pytest.importorskip("lm_eval")
    assert set(names.task_manager().all_tasks) == set(PACK_TASKS) | set(PACK_TAGS)


def test_unknown_names_fail_fast_with_a_static_did_you_mean(monkeypatch):
    def index(*a, **k):
        raise AssertionError("resolving names must not index lm-eval")

    monkeypatch.setattr(names, "task_manager", index)
    with pytest.raises(SwappruneError, match="did you mean 'winogrande'"):
        resolve_tasks(["winogrand"])
    with pytest.raises(SwappruneError, match="unknown task 'no_such_task_xyz'"):
        resolve_tasks(["no_such_task_xyz"])
    # Part of a real name is not a name.
    with pytest.raises(SwappruneError, match="unknown task 'hellaswa'"):
        resolve_tasks(["hellaswa"])
    assert resolve_tasks(["hellaswag", "arc_challenge"]) == ["hellaswag", "arc_challenge"]


def test_lm_eval_index_catches_what_the_text_scan_lets_through():
    class Manager:
        all_tasks = ["hellaswag", "arc_easy"]

    names.check_known(["hellaswag"], Manager())
    with pytest.raises(SwappruneError, match="did you mean 'hellaswag'"):
        names.check_known(["hellaswag_x"], Manager())
