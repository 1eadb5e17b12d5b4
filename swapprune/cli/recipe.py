"""``swapprune run RECIPE.yaml [--set key=value ...]``: run a recipe (a configuration file)."""

from __future__ import annotations

import dataclasses
import json
import shlex

from swapprune.cli import say_to_stderr
from swapprune.errors import SwappruneError
from swapprune.recipe import describe_schema, load_config

EPILOG = """examples:
  swapprune run recipes/demo.yaml
  swapprune run recipes/prune_heal_quantize.yaml --set prune.budget=6 --set export.output=runs/b6
  swapprune run recipes/prune_heal.yaml --set heal.steps=50 --set eval=null --dry-run
  swapprune run --schema            # every stage and field, with defaults and help
--set values are YAML (3, true, [a, b], null); 'stage=null' skips a stage."""


def add_arguments(p) -> None:
    p.add_argument("recipe", nargs="?", help="recipe YAML file (see recipes/)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe field, e.g. --set heal.steps=100 (repeatable)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="validate (the budget too, against the model's config) and print the "
        "resolved recipe; load no weights",
    )
    p.add_argument("--schema", action="store_true", help="print every recipe field and exit")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars and stage lines")


def run(args) -> int:
    if args.schema:
        print(describe_schema())
        return 0
    if not args.recipe:
        raise SwappruneError("give a recipe file: swapprune run RECIPE.yaml (or --schema)")
    cfg = load_config(args.recipe, args.overrides)
    if args.dry_run:
        from swapprune.pipeline.checks import check_model, read_facts  # imports numpy

        facts = read_facts(cfg)
        if facts is not None:
            check_model(cfg, facts)
        print(cfg.to_yaml(), end="")
        print(f"# valid; {facts.num_layers if facts else 'unknown (config not readable)'} blocks")
        return 0
    from swapprune.cli import next_steps  # imports numpy, tqdm
    from swapprune.cli.summary import print_run_summary  # imports numpy, tqdm
    from swapprune.pipeline.sequence import run as run_pipeline  # imports numpy

    command = ["swapprune", "run", args.recipe, *sum((["--set", o] for o in args.overrides), [])]
    res = run_pipeline(
        cfg,
        say=say_to_stderr(args),
        progress=not args.no_progress,
        command=command,
        wording=next_steps.wording(quick=next_steps.recipe_quick(cfg)),
    )
    print_run_summary(res, recipe_writer(args.recipe, args.overrides, cfg))
    return 0


#: The sections a cut suggested after a recipe run may change.
CUT_SECTIONS = ("calibration", "prune", "cost", "export")


def recipe_writer(recipe: str, overrides: list[str], cfg):
    """Writes a run that differs from the recipe's ``cfg`` in its cut as the recipe's command:
    its own ``--set`` overrides, then one for each field that differs (later ones win)."""

    def write(new) -> str:
        sets = list(overrides)
        for name in CUT_SECTIONS:
            old, now = getattr(cfg, name), getattr(new, name)
            if now is None:
                if old is not None:
                    sets.append(f"{name}=null")
                continue
            for f in dataclasses.fields(now):
                value = getattr(now, f.name)
                if old is None or getattr(old, f.name) != value:
                    sets.append(f"{name}.{f.name}={yaml_value(value)}")
        argv = ["swapprune", "run", recipe]
        for item in sets:
            argv += ["--set", item]
        return shlex.join(argv)

    return write


def yaml_value(value) -> str:
    """``value`` as ``--set`` reads it (YAML): plain text when it reads back as itself."""
    import yaml  # imports yaml

    if isinstance(value, str) and yaml.safe_load(value) == value:
        return value
    return json.dumps(value)
