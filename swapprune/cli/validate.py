"""``swapprune validate``: does each criterion predict the real cost of deleting a block?"""

from __future__ import annotations

from swapprune.cli.options import _csv, add_common, add_section, section_from
from swapprune.config import CalibrationConfig, ModelConfig, RunConfig

EPILOG = """examples:
  swapprune validate --output validity/
  swapprune validate --criteria interchange,replacement,bi --prompts 16 --tokens 64 --output v/
For every criterion: the Spearman correlation, over blocks, between its per-block
removability and the measured calibration-perplexity increase of deleting that one block,
with a bootstrap CI over windows (the paper's predictor check)."""


def add_arguments(p) -> None:
    from swapprune.validity import DEFAULT_CRITERIA

    add_section(p, ModelConfig, "model")
    add_section(p, CalibrationConfig, "calibration")
    g = p.add_argument_group("validity")
    g.add_argument(
        "--criteria",
        type=_csv(str),
        default=list(DEFAULT_CRITERIA),
        metavar="A,B",
        help=f"criteria to check (default: {','.join(DEFAULT_CRITERIA)})",
    )
    g.add_argument(
        "--bootstrap", type=int, default=1000, help="bootstrap resamples (default: 1000)"
    )
    g.add_argument(
        "--target",
        default="wikitext2-test",
        help="text the deletion cost is measured on: wikitext2-test (default; held "
        "out from the criteria's calibration text), 'calibration' (the same "
        "windows: SLEB then scores 1 by construction), or a .txt file",
    )
    g.add_argument("--output", default=None, help="directory for validity.json/.md/.png (required)")
    add_common(p, quick=True)


def run(args) -> int:
    from pathlib import Path

    from swapprune import criteria, stages
    from swapprune.artifacts import check_output_dir
    from swapprune.errors import SwappruneError
    from swapprune.validity import predictor_validity, validity_markdown, write_validity_report

    if not args.output:
        raise SwappruneError("--output is required: a directory for the validity report")
    if args.bootstrap < 1:
        raise SwappruneError(f"bootstrap must be >= 1, got {args.bootstrap}")
    for name in args.criteria:
        criteria.get(name)
    if args.target not in ("wikitext2-test", "calibration") and not Path(args.target).is_file():
        raise SwappruneError(f"--target file {args.target} not found")
    cfg = RunConfig(
        model=section_from(args, ModelConfig, "model"),
        calibration=section_from(args, CalibrationConfig, "calibration"),
    )
    for section in (cfg.model, cfg.calibration):
        section.check()
    check_output_dir(args.output)
    loaded = stages.load(cfg, not args.no_progress)
    calibration = stages.calibrate(cfg, loaded)
    c = cfg.calibration
    target = None
    if args.target != "calibration":
        from swapprune.calibration import vendored_text, windows_from_text

        text = (
            vendored_text("wiki.test.raw")
            if args.target == "wikitext2-test"
            else Path(args.target).read_text(encoding="utf-8")
        )
        target = windows_from_text(text, loaded.tokenizer, c.prompts, c.tokens, c.seed, args.target)
    result = predictor_validity(
        loaded.model,
        loaded.tokenizer,
        calibration,
        args.criteria,
        target=target,
        positions=c.positions,
        batch_size=c.batch_size,
        n_boot=args.bootstrap,
        seed=c.seed,
        progress=not args.no_progress,
    )
    out = write_validity_report(result, args.output)
    print(validity_markdown(result), end="")
    print(f"wrote {Path(out) / 'validity.json'}")
    print("next: prune with the criterion that predicts best: swapprune --budget 4 --protocol NAME")
    return 0
