"""The in-phase constraint of a selection (``--serve``), resolved before any weights load.

A runtime that derives each layer's attention type from its index (llama.cpp
and transformers' GGUF loader for Gemma-2/3, vLLM for GPT-OSS, ...) serves a
cut correctly only when every kept layer lands on a slot whose derived type is
its own (:mod:`swapprune.model.phase`). ``--serve RUNTIME,...`` makes only such
removal sets eligible; it is the default while a GGUF is written and its
runtimes constrain the family (:data:`GGUF_RUNTIMES`), and ``--serve none``
drops it. :func:`resolve` turns the setting and the model's facts into a
:class:`ServeConstraint` (or ``None``), carried by the selection's
:class:`~swapprune.select.constraints.Constraints`; :meth:`ServeConstraint.check`
refuses, in one line, a budget no eligible set meets. :mod:`swapprune.select.serve`
enforces it. Pure: no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from swapprune.errors import SwappruneError, unknown_name
from swapprune.model.phase import (
    PhaseRule,
    check_feasible,
    constrained_runtimes,
    count_in_phase,
    in_phase,
)
from swapprune.model.serving import artifact_facts, derived_types
from swapprune.model.serving_rules import FULL, RUNTIMES, rule_for

if TYPE_CHECKING:
    from swapprune.config.gguf_output import GGUFOutput
    from swapprune.config.run import RunConfig
    from swapprune.model.facts import ModelFacts
    from swapprune.select.constraints import Constraints

NONE = "none"
#: The default ``--serve`` while a GGUF is written: the runtimes that read it.
GGUF_RUNTIMES = ("llama.cpp", "transformers-gguf")


@dataclass(frozen=True)
class ServeConstraint:
    """Removal sets must keep every rule in phase.

    Attributes:
        runtimes: the runtimes that constrain this family (the requested ones that
            derive types from the index).
        types: the model's own per-layer types (``L`` entries).
        default: set by default because a GGUF is written (not by ``--serve``).
        rules: the runtimes' :class:`~swapprune.model.phase.PhaseRule`.
    """

    runtimes: tuple[str, ...]
    types: tuple[str, ...]
    default: bool = False
    rules: tuple[PhaseRule, ...] = field(default=(), compare=False, repr=False)

    def in_phase(self, removed: Iterable[int]) -> bool:
        """Whether removing ``removed`` keeps every rule in phase."""
        return in_phase(self.types, removed, list(self.rules))

    def eligible(self, budget: int, protected: Iterable[int] = ()) -> int:
        """How many removal sets of ``budget`` keep every rule in phase (exact)."""
        return count_in_phase(self.types, budget, list(self.rules), protected)

    def check(self, budget: int, cons: Constraints) -> int:
        """The number of eligible sets; one line when there is none (before any forward pass)."""
        try:
            return check_feasible(self.types, budget, list(self.rules), cons.protected())
        except SwappruneError as e:
            if not self.default:
                raise
            raise SwappruneError(
                f"{e}; the constraint is on because a GGUF is written: --serve none drops it"
            ) from None

    def describe(self) -> str:
        return ", ".join(self.runtimes)


def check_names(names: Sequence[str] | None) -> None:
    """``--serve``: known runtime names, or ``none`` alone."""
    if names is None:
        return
    if not names:
        raise SwappruneError(f"--serve needs runtime names ({', '.join(RUNTIMES)}) or none")
    for name in names:
        if name != NONE and name not in RUNTIMES:
            raise unknown_name("serving runtime", name, [*RUNTIMES, NONE])
    if NONE in names and len(names) > 1:
        raise SwappruneError("--serve none drops the constraint; it takes no other runtime")


def own_types(facts: ModelFacts) -> list[str]:
    """The model's own per-layer types: as its config lists them, else as its loader derives them.

    A GGUF states no types; transformers' GGUF loader gives the config class's
    default pattern for the depth, which is what the loaded model will have.
    """
    if facts.layer_types:
        return list(facts.layer_types)
    config = facts.config or {}
    gguf = "general.architecture" in config
    rule = rule_for(facts.model_type, "transformers-gguf" if gguf else "transformers")
    if rule is None:
        return [FULL] * facts.num_layers
    return derived_types(rule, facts.num_layers, artifact_facts(config) if config else None)


def resolve(
    names: Sequence[str] | None, facts: ModelFacts, gguf: GGUFOutput | None = None
) -> ServeConstraint | None:
    """The constraint of ``--serve names`` on this model, or ``None`` when nothing constrains it.

    Args:
        names: ``--serve`` (``None``: the default, :data:`GGUF_RUNTIMES` while a GGUF
            is written, else nothing; ``["none"]``: nothing).
        facts: the model's facts (``model_type``, depth, ``layer_types``, ``config``).
        gguf: the run's resolved ``--gguf``: when it writes the GGUF, the rules read the
            source GGUF's metadata (a per-layer list in it is trimmed, not lost).

    Raises:
        SwappruneError: a named runtime that does not serve this family.
    """
    check_names(names)
    source, default = gguf.source if gguf is not None and gguf.write else None, names is None
    if names is None:
        if source is None:
            return None
        names = [rt for rt in GGUF_RUNTIMES if rule_for(facts.model_type, rt) is not None]
    elif list(names) == [NONE]:
        return None
    config = source.metadata if source is not None else facts.config
    rules = constrained_runtimes(facts.model_type, list(dict.fromkeys(names)), config)
    if not rules:
        return None
    runtimes = tuple(r.runtime for r in rules)
    return ServeConstraint(runtimes, tuple(own_types(facts)), default, tuple(rules))


def for_run(config: RunConfig, facts: ModelFacts) -> ServeConstraint | None:
    """The constraint of a run's selection: ``prune.serve``, defaulting on the run's ``--gguf``."""
    from swapprune.config.gguf_output import gguf_output

    assert config.prune is not None
    gguf = gguf_output(config) if config.export is not None else None
    return resolve(config.prune.serve, facts, gguf)
