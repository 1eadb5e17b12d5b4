"""Prune 8 of SmolLM2-135M's 30 blocks (interchange-guided), then W4A16, in one llm-compressor recipe.

The checkpoint is compressed-tensors (loads in vLLM and in plain transformers).
The script reloads it with ``AutoModelForCausalLM.from_pretrained`` and reports
size on disk and WikiText-2 perplexity (swapprune's matched contract) for the
base, the pruned and the pruned+quantized model, and the cost of scoring inside
oneshot against the same scoring outside it.

    make install-llmcompressor        # or: pip install 'swapprune[llmcompressor]'
    .venv-llmc/bin/python recipes/llmcompressor/prune_w4a16.py --output runs/smollm2-llmc

Writes OUTPUT/checkpoint/ (the model), OUTPUT/plan.json and OUTPUT/report.json.
Calibration: 32 windows x 64 tokens of the vendored WikiText-2 validation text,
the setting of ``make demo``, handed to oneshot as its dataset so that the
pruning modifier and any data-driven quantizer see the same windows.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def _saved_bytes(model) -> int:
    """Bytes of the weights as transformers writes them (safetensors in the model's dtype)."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        return sum(f.stat().st_size for f in Path(tmp).glob("*.safetensors"))


def _ppl(model, tok, words: int | None) -> dict:
    from swapprune.evaluation import evaluate

    t = time.perf_counter()
    res = evaluate(model, tok, ["wikitext2_ppl"], **({"words": words} if words else {}))
    task = next(iter(res.tasks.values()))
    name, m = next(iter(task.metrics.items()))
    return {
        "metric": name,
        "value": m.value,
        "low": m.low,
        "high": m.high,
        "seconds": round(time.perf_counter() - t, 1),
    }


def _timed(fn, *args, **kwargs):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, {
        "wall_s": round(time.perf_counter() - wall, 2),
        "cpu_s": round(time.process_time() - cpu, 2),
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--budget", type=int, default=8)
    ap.add_argument("--protocol", default="interchange")
    ap.add_argument("--samples", type=int, default=32, help="calibration windows")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per calibration window")
    ap.add_argument(
        "--group-size",
        type=int,
        default=64,
        help="W4A16 group size (SmolLM2's hidden size 576 is not a multiple of 128)",
    )
    ap.add_argument(
        "--words",
        type=int,
        default=None,
        help="WikiText-2 test words for perplexity (default: the contract's 5000)",
    )
    ap.add_argument("--no-eval", action="store_true", help="skip the perplexity evaluations")
    ap.add_argument(
        "--compare-cost",
        action="store_true",
        help="also time the same scoring outside oneshot (after it, so the inside run is "
        "the cold one; scoring_cost.py alternates them after a warm-up)",
    )
    ap.add_argument("--output", type=Path, default=Path("runs/smollm2-llmc"))
    args = ap.parse_args(argv)

    from compressed_tensors.quantization import preset_name_to_scheme
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM

    import swapprune
    from swapprune.integrations.llmcompressor import DepthPruningModifier, calibration_dataloader
    from swapprune.edit.surgery import apply_plan

    torch.manual_seed(0)
    report: dict = {
        "model": args.model,
        "budget": args.budget,
        "protocol": args.protocol,
        "calibration": {"samples": args.samples, "tokens": args.tokens},
        "torch_threads": torch.get_num_threads(),
    }
    start = time.perf_counter(), time.process_time()
    model, tok, _ = swapprune.load_model(args.model, progress=False)
    layers = model.config.num_hidden_layers
    report["size_bytes"] = {"base": _saved_bytes(model)}
    if not args.no_eval:
        report["ppl"] = {"base": _ppl(model, tok, args.words)}

    loader = calibration_dataloader(tok, samples=args.samples, tokens=args.tokens)
    scheme = preset_name_to_scheme("W4A16", ["Linear"])
    scheme.weights.group_size = args.group_size
    pruner = DepthPruningModifier(
        budget=args.budget,
        protocol=args.protocol,
        prompts=args.samples,
        tokens=args.tokens,
    )
    recipe = [pruner, QuantizationModifier(config_groups={"group_0": scheme}, ignore=["lm_head"])]
    model, report["oneshot"] = _timed(
        oneshot, model=model, processor=tok, dataset=loader, recipe=recipe
    )
    report["inside_oneshot"] = {k: round(v, 2) for k, v in pruner.timings.items()}
    plan = pruner.plan
    report["plan"] = {"removed": plan.removed, "kept": len(plan.kept), "of": layers}

    ckpt = args.output / "checkpoint"
    if ckpt.exists():
        shutil.rmtree(ckpt)
    args.output.mkdir(parents=True, exist_ok=True)
    plan.to_json(args.output / "plan.json")
    _, report["save"] = _timed(model.save_pretrained, ckpt, save_compressed=True)
    tok.save_pretrained(ckpt)
    report["size_bytes"]["pruned_w4a16_checkpoint_dir"] = _dir_bytes(ckpt)
    report["size_bytes"]["pruned_w4a16_safetensors"] = sum(
        f.stat().st_size for f in ckpt.glob("*.safetensors")
    )
    del model

    # The pruned model alone: the same plan, the same surgery, on a fresh copy of the base.
    pruned, tok, _ = swapprune.load_model(args.model, progress=False)
    if args.compare_cost:
        import dataclasses

        from swapprune.api import plan_pruning
        from swapprune.calibration.windows import Calibration

        windows = torch.cat([b["input_ids"] for b in loader])
        select, cal = pruner.configs(*windows.shape)
        with torch.no_grad():
            (outside, _), cost = _timed(
                plan_pruning,
                pruned,
                None,
                progress=False,
                calibration=Calibration(windows, "same windows", 0),
                **dataclasses.asdict(select),
                positions=cal.positions,
                batch_size=cal.batch_size,
                seed=cal.seed,
            )
        assert outside.removed == plan.removed, (outside.removed, plan.removed)
        report["outside_oneshot"] = cost
        report["inside_over_outside"] = {
            "wall": round(pruner.timings["plan"] / cost["wall_s"], 3),
            "cpu": round(pruner.timings["plan_cpu"] / cost["cpu_s"], 3),
        }
    apply_plan(pruned, plan)
    report["size_bytes"]["pruned"] = _saved_bytes(pruned)
    if not args.no_eval:
        report["ppl"]["pruned"] = _ppl(pruned, tok, args.words)
    del pruned

    reloaded = AutoModelForCausalLM.from_pretrained(ckpt).eval()
    assert reloaded.config.num_hidden_layers == layers - args.budget
    if not args.no_eval:
        report["ppl"]["pruned_w4a16_reloaded"] = _ppl(reloaded, tok, args.words)
    report["total"] = {
        "wall_s": round(time.perf_counter() - start[0], 1),
        "cpu_s": round(time.process_time() - start[1], 1),
    }
    (args.output / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
