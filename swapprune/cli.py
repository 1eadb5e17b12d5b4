"""Command line: a thin layer that parses, calls the library and prints.

``swapprune --budget 8 --protocol interchange`` (no sub-command) runs the main
job, ``swapprune prune``. Every user error prints one line and exits with 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from swapprune.errors import SwappruneError

DEFAULT_MODEL = "smollm2-135m"
COMMANDS = ("prune", "score", "apply", "eval", "compare", "run", "list")

EPILOG = """examples:
  swapprune --budget 8 --protocol interchange --output pruned/
  swapprune score --model smollm2-135m --pairs adjacent --out scores.json
  swapprune prune --model Qwen/Qwen3-8B --budget 5 --protocol interchange --device-map auto --output q3-31L/
  swapprune apply --plan pruned/plan.json --model smollm2-135m --output again/
  swapprune compare --budgets 1,3,5 --protocols interchange,replacement --out cmp/
  swapprune list
indices are 0-based block indices everywhere."""


def _model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", default=DEFAULT_MODEL,
                   help="hub id, local directory, .gguf file or alias (default: %(default)s)")
    g.add_argument("--dtype", default=None, help="float32 (default), bfloat16 or float16")
    g.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if present)")
    g.add_argument("--device-map", default=None, help="e.g. auto: accelerate places/offloads weights")
    g.add_argument("--trust-remote-code", action="store_true", help="allow model code from the hub")


def _calib_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("calibration")
    g.add_argument("--calib", default=None,
                   help="wikitext2-valid (default, vendored), a .txt file, a .jsonl prompt set, or a datasets name")
    g.add_argument("--prompts", type=int, default=64, help="number of windows (default: %(default)s)")
    g.add_argument("--tokens", type=int, default=128, help="tokens per window (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="window pick, bootstrap and random criterion seed")
    g.add_argument("--positions", default="all", choices=("last", "all"),
                   help="where KL is measured: every position (default; see eval/BENCHMARKS.md) or the last (the paper)")
    g.add_argument("--batch-size", type=int, default=8, help="windows per forward pass")
    g.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _prune_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("selection")
    g.add_argument("--budget", type=int, required=True, help="number of blocks to remove or merge")
    g.add_argument("--protocol", default="interchange",
                   help="criterion: interchange, replacement, deletion, bi, angular, sleb, random, reverse")
    g.add_argument("--strategy", default=None,
                   help="greedy (default), spaced:G, contiguous, beam:W, iterative (default for sleb)")
    g.add_argument("--op", default="remove", help="remove (default) or merge")
    g.add_argument("--merge", default="average", help="merge rule: average (default) or laco")
    g.add_argument("--protect-first", type=int, default=0, help="never remove the first k blocks")
    g.add_argument("--protect-last", type=int, default=0, help="never remove the last k blocks")
    g.add_argument("--oracle", default="ppl", choices=("ppl", "kl"), help="metric of beam/sleb queries")
    g.add_argument("--max-oracle-calls", type=int, default=400, help="cap for beam search")
    g.add_argument("--scores", default=None, help="reuse a scores.json instead of probing")


def _out_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("output")
    g.add_argument("--output", "-o", required=True, help="checkpoint directory to write")
    g.add_argument("--overwrite", action="store_true", help="replace a non-empty output directory")
    g.add_argument("--save-dtype", default=None, help="dtype of the saved weights (default: as loaded)")
    g.add_argument("--no-selfcheck", action="store_true", help="skip the reload/generate self-check")


def model_opts_from(a):
    """The :class:`~swapprune.pipeline.ModelOptions` of parsed ``_model_args``."""
    from swapprune.pipeline import ModelOptions

    return ModelOptions(a.model, a.dtype, a.device, a.device_map, a.trust_remote_code)


def calib_opts_from(a):
    """The :class:`~swapprune.pipeline.CalibOptions` of parsed ``_calib_args``."""
    from swapprune.pipeline import CalibOptions

    return CalibOptions(a.calib, a.prompts, a.tokens, a.seed, a.positions, a.batch_size,
                        not a.no_progress)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swapprune", description="Protocol-aware layer pruning with swap-KL probes.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("prune", help="score, select, remove/merge and save a checkpoint (default)",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _model_args(p), _calib_args(p), _prune_args(p), _out_args(p)

    p = sub.add_parser("score", help="measure swap-KL probes and write scores.json")
    _model_args(p), _calib_args(p)
    p.add_argument("--out", required=True, help="scores JSON (resumed if it exists)")
    p.add_argument("--protocols", default="replacement,interchange",
                   help="comma list of replacement, interchange, deletion")
    p.add_argument("--pairs", default="adjacent", help="adjacent (default), all, gap:K, or 3-4,7-9")
    p.add_argument("--cache-gb", type=float, default=4.0, help="memory for cached hidden states")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples")

    p = sub.add_parser("apply", help="re-apply a plan.json to a model and save it")
    _model_args(p)
    p.add_argument("--plan", required=True, help="plan.json written by a previous run")
    _out_args(p)

    sub.add_parser("list", help="print the registered criteria, strategies, merges, tasks")

    from swapprune import commands  # sub-commands with more options live there

    commands.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help"):
        argv.insert(0, "prune")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        from swapprune import commands

        return commands.dispatch(args) or 0
    except SwappruneError as e:
        print(f"swapprune: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("swapprune: interrupted", file=sys.stderr)
        return 130


def print_json(data) -> None:
    print(json.dumps(data, indent=1))


if __name__ == "__main__":
    sys.exit(main())
