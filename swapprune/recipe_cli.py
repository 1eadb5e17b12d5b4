"""``swapprune run RECIPE.yaml [--set key=value ...]``: run a recipe from the command line.

Parses, validates the recipe (one-line error, exit 2, nothing written), calls
:func:`swapprune.recipe_run.run_recipe` and prints a summary.
"""

from __future__ import annotations

import argparse
import sys

EPILOG = """examples:
  swapprune run recipes/demo.yaml
  swapprune run recipes/prune_heal_quantize.yaml --set prune.budget=6 --set export.output=runs/b6
  swapprune run recipes/prune_heal.yaml --set heal.steps=50 --set eval=null --dry-run
  swapprune run --schema            # every stage and field, with defaults and help
--set values are YAML (3, true, [a, b], null); 'stage=null' skips a stage."""


def add_parsers(sub) -> None:
    """Define the ``run`` sub-command."""
    p = sub.add_parser("run", help="run a YAML recipe: prune -> heal -> quantize -> eval -> export",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe", nargs="?", help="recipe YAML file (see recipes/)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe field, e.g. --set heal.steps=100 (repeatable)")
    p.add_argument("--dry-run", action="store_true",
                   help="validate (including the budget against the model config) and print the "
                        "resolved recipe; load no weights")
    p.add_argument("--schema", action="store_true", help="print every recipe field and exit")
    p.set_defaults(handler=cmd_run)


def cmd_run(a) -> int:
    from swapprune.errors import SwappruneError
    from swapprune.recipe import describe_schema, load_recipe

    if a.schema:
        print(describe_schema())
        return 0
    if not a.recipe:
        raise SwappruneError("give a recipe file: swapprune run RECIPE.yaml (or --schema)")
    recipe = load_recipe(a.recipe, a.overrides)
    if a.dry_run:
        from swapprune.recipe_run import config_layers

        n = config_layers(recipe)
        if n is not None and recipe.prune is not None:
            recipe.prune.request(recipe.calibration.seed).validate(n)
        print(recipe.to_yaml(), end="")
        print(f"# valid; {n if n is not None else 'unknown (config not readable)'} blocks")
        return 0
    from swapprune.recipe_run import run_recipe

    res = run_recipe(recipe, progress=lambda s: print(s, file=sys.stderr, flush=True),
                     command=["swapprune", "run", a.recipe, *sum((["--set", o] for o in a.overrides), [])])
    m = res["metrics"]
    print(f"plan: {m['plan']}")
    for point, costs in m["costs"].items():
        print(f"{point}: " + ", ".join(f"{k} {v:.4g}" for k, v in costs.items()))
    rec = m.get("recovery") or {}
    if rec.get("primary"):
        f = rec[rec["primary"]]["fraction"]
        print(f"recovered fraction ({rec['primary']}): " + (f"{f:.3f}" if f is not None else "n/a"))
    if res["output"]:
        print(f"run directory: {res['output']}")
    return 0
