"""Task names: swapprune's own tasks, short aliases, and lm-eval pass-through.

Validation happens here, before any model is loaded or run: unknown names fail
fast with a did-you-mean. Indexing lm-eval's ~15k built-in task YAMLs takes
seconds, so it is only done when a name is not one of ours.
"""

from __future__ import annotations

import difflib
import functools
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from swapprune.errors import SwappruneError, unknown_name
from swapprune.evaluation.quiet import quiet_lm_eval

if TYPE_CHECKING:
    from lm_eval.tasks import TaskManager

#: Directory of the lm-eval task pack (YAML + utils.py), for ``TaskManager(include_path=...)``.
PACK_DIR = Path(__file__).resolve().parent.parent / "tasks"

#: The paper's matched perplexity contract; run by swapprune through lm-eval's
#: model API because its windows live in token space (see ``perplexity.py``).
WIKITEXT2_PPL = "swapprune_wikitext2_ppl"
NATIVE_TASKS = (WIKITEXT2_PPL,)

ALIASES = {
    "wikitext2_ppl": WIKITEXT2_PPL,
    "wikitext": "swapprune_wikitext",
    "lambada": "swapprune_lambada_openai",
    "lambada_openai": "swapprune_lambada_openai",
    "piqa": "swapprune_piqa",
    "winogrande": "swapprune_winogrande",
    "arc_easy": "swapprune_arc_easy",
    "boolq": "swapprune_boolq",
}


@functools.cache
def task_manager(include_defaults: bool = False) -> TaskManager:
    """Return a cached ``TaskManager`` over the pack (and lm-eval's tasks if asked).

    Args:
        include_defaults: Also index lm-eval's built-in tasks (slow, seconds).
    """
    from lm_eval.tasks import TaskManager

    # Indexing warns about every odd YAML in lm-eval's tree; none concern us.
    with quiet_lm_eval(logging.ERROR):
        return TaskManager(include_path=str(PACK_DIR), include_defaults=include_defaults)


def pack_names() -> list[str]:
    """Names of the tasks and tags in the pack, plus the native tasks."""
    return sorted(set(task_manager().all_tasks) | set(NATIVE_TASKS))


def _suggestions(name: str, lm_eval_names: Iterable[str]) -> list[str]:
    """Our names plus the few lm-eval names closest to ``name``.

    Listing all of lm-eval's tasks in an error message would be useless, so
    only the nearest ones join the candidates for the did-you-mean.
    """
    close = difflib.get_close_matches(name, list(lm_eval_names), n=3, cutoff=0.6)
    return sorted(set(ALIASES) | set(pack_names()) | set(close))


def resolve_tasks(names: Iterable[str]) -> list[str]:
    """Map aliases to task names, drop duplicates and check every name exists.

    Args:
        names: Aliases (``piqa``), swapprune task names, pack tags, or any
            lm-eval task, group or tag name.

    Returns:
        Canonical names in the given order, without duplicates.

    Raises:
        SwappruneError: If a name is neither ours nor known to lm-eval, or the
            list is empty.
    """
    resolved = list(dict.fromkeys(ALIASES.get(n, n) for n in names))
    if not resolved:
        raise SwappruneError("no evaluation tasks given")
    ours = set(pack_names())
    foreign = [n for n in resolved if n not in ours]
    if foreign:
        known = set(task_manager(include_defaults=True).all_tasks)
        for name in foreign:
            if name not in known:
                err = unknown_name("task", name, _suggestions(name, known))
                raise SwappruneError(f"{err} (or any lm-eval task name)")
    return resolved


def needs_lm_eval_defaults(names: Iterable[str]) -> bool:
    """Whether resolved ``names`` include a task outside the pack."""
    ours = set(pack_names())
    return any(n not in ours for n in names)
