"""Task names: swapprune's own tasks, short aliases, and lm-eval pass-through.

Validation happens here, before any model is loaded or run, and imports no
lm-eval: the pack's names are a static list (a test keeps it equal to the
YAMLs), so ours and their aliases resolve instantly and a typo of one fails
at once with a did-you-mean from that list. Any other name is taken for an
lm-eval task, group or tag. Indexing lm-eval's ~15k task YAMLs takes 20-50 s,
so it is not done here: a name that occurs in none of lm-eval's task YAMLs (a
plain text scan, well under a second) is refused at once; the rest are checked
against lm-eval's index when :func:`swapprune.evaluation.evaluate` builds it to
run them (:func:`check_known`).
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from swapprune.errors import SwappruneError, unknown_name
from swapprune.evaluation import contract
from swapprune.evaluation.quiet import quiet_lm_eval

if TYPE_CHECKING:
    from lm_eval.tasks import TaskManager

#: Directory of the lm-eval task pack (YAML + utils.py), for ``TaskManager(include_path=...)``.
PACK_DIR = Path(__file__).resolve().parent.parent / "tasks"

#: The paper's matched perplexity contract; run by swapprune through lm-eval's
#: model API because its windows live in token space (see ``perplexity.py``).
WIKITEXT2_PPL = contract.TASK
#: Every article of WikiText-2 test outside the matched contract's words, with
#: an article-clustered CI (see ``extended.py``); also run by swapprune itself.
EXTENDED_PPL = "swapprune_wikitext2_ext"
NATIVE_TASKS = (WIKITEXT2_PPL, EXTENDED_PPL)

#: The pack's task and tag names (``task:`` and ``tag:`` of ``swapprune/tasks/*.yaml``).
PACK_TASKS = (
    "swapprune_arc_easy",
    "swapprune_boolq",
    "swapprune_lambada_openai",
    "swapprune_piqa",
    "swapprune_wikitext",
    "swapprune_winogrande",
)
PACK_TAGS = ("swapprune_zeroshot",)

ALIASES = {
    "wikitext2_ppl": WIKITEXT2_PPL,
    "wikitext2_ext": EXTENDED_PPL,
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
    from lm_eval.tasks import TaskManager  # imports lm_eval

    # Indexing warns about every odd YAML in lm-eval's tree; none concern us.
    with quiet_lm_eval(logging.ERROR):
        return TaskManager(include_path=str(PACK_DIR), include_defaults=include_defaults)


def pack_names() -> list[str]:
    """Names of the tasks and tags in the pack, plus the native tasks (static; no lm-eval)."""
    return sorted(set(PACK_TASKS) | set(PACK_TAGS) | set(NATIVE_TASKS))


def _ours() -> list[str]:
    return sorted(set(ALIASES) | set(pack_names()))


def _lm_eval_tasks_dir() -> Path | None:
    spec = importlib.util.find_spec("lm_eval")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    tasks = Path(next(iter(spec.submodule_search_locations))) / "tasks"
    return tasks if tasks.is_dir() else None


def lm_eval_mentions(names: Iterable[str]) -> set[str]:
    """Those of ``names`` written as a whole word in some YAML of lm-eval's task tree.

    A fast necessary condition for being an lm-eval task, group or tag (all of
    which are named in those YAMLs): a name missing here is surely unknown to
    lm-eval. Reads the files as text; imports nothing.
    """
    names = set(names)
    root = _lm_eval_tasks_dir()
    if not names or root is None:
        return set()
    pattern = re.compile(
        rb"(?<![\w.-])(" + b"|".join(re.escape(n.encode()) for n in sorted(names)) + rb")(?![\w.-])"
    )
    found: set[str] = set()
    for folder, _, files in os.walk(root):
        for f in files:
            if not f.endswith((".yaml", ".yml")):
                continue
            try:
                with open(os.path.join(folder, f), "rb") as fh:
                    text = fh.read()
            except OSError:
                continue
            found.update(m.decode() for m in pattern.findall(text))
            if found == names:
                return found
    return found


def _suggestions(name: str, lm_eval_names: Iterable[str] = ()) -> list[str]:
    """Our names plus the few lm-eval names closest to ``name`` (when an index is at hand).

    Listing all of lm-eval's tasks in an error message would be useless, so
    only the nearest ones join the candidates for the did-you-mean.
    """
    close = difflib.get_close_matches(name, list(lm_eval_names), n=3, cutoff=0.6)
    return sorted(set(_ours()) | set(close))


def _unknown(name: str, lm_eval_names: Iterable[str] = ()) -> SwappruneError:
    err = unknown_name("task", name, _suggestions(name, lm_eval_names))
    return SwappruneError(f"{err} (or any lm-eval task name)")


def resolve_tasks(names: Iterable[str]) -> list[str]:
    """Map aliases to task names, drop duplicates and check every name, without lm-eval.

    Args:
        names: Aliases (``piqa``), swapprune task names, pack tags, or any
            lm-eval task, group or tag name.

    Returns:
        Canonical names in the given order, without duplicates.

    Raises:
        SwappruneError: If the list is empty, or a name is neither ours nor
            named anywhere in lm-eval's task YAMLs (with a did-you-mean from
            our names). lm-eval's own names are checked by :func:`check_known`.
    """
    resolved = list(dict.fromkeys(ALIASES.get(n, n) for n in names))
    if not resolved:
        raise SwappruneError("no evaluation tasks given")
    ours = set(pack_names())
    foreign = [n for n in resolved if n not in ours]
    if foreign:
        mentioned = lm_eval_mentions(foreign)
        for name in foreign:
            if name not in mentioned:
                raise _unknown(name)
    return resolved


def check_known(names: Iterable[str], manager: TaskManager) -> None:
    """Refuse names the (already built) lm-eval ``manager`` does not index.

    Raises:
        SwappruneError: for the first unknown name, with a did-you-mean from our
            names and the closest of the manager's.
    """
    known = set(manager.all_tasks)
    for name in names:
        if name not in known:
            raise _unknown(name, known)


def needs_lm_eval_defaults(names: Iterable[str]) -> bool:
    """Whether resolved ``names`` include a task outside the pack."""
    ours = set(pack_names())
    return any(n not in ours for n in names)
