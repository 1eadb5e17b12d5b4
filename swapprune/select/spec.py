"""A selection request, resolved and validated once: :class:`SelectionSpec`.

The configuration (:class:`~swapprune.config.SelectConfig` and the calibration
settings) is checked when it is built; everything below :func:`swapprune.select.select`
receives the frozen spec and never re-checks a name or a budget.

Three policies reach one :func:`~swapprune.select.select`:

* ``fixed``: probe (or reuse scores) on the given windows, rank, choose;
* ``adaptive``: probe in tranches of a window pool until the selection is
  settled (:mod:`swapprune.select.adaptive`), then choose as ``fixed``;
* ``auto``: both swap protocols, the paper's regime call and the action it
  implies (:mod:`swapprune.select.auto`). ``auto`` is a policy over criteria,
  not a criterion: it has no importance of its own.

Pure: imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from swapprune.edit.merging import get_merge
from swapprune.errors import SwappruneError, unknown_name
from swapprune.select import criteria as criteria_mod
from swapprune.select.constraints import Constraints
from swapprune.select.search import Beam
from swapprune.select.strategies import Strategy, get_strategy
from swapprune.stats import N_BOOT

if TYPE_CHECKING:
    from swapprune.config import CalibrationConfig, SelectConfig
    from swapprune.select.constraints import ServeConstraint

AUTO = "auto"
#: What ``auto`` does, for ``swapprune list``.
AUTO_WHAT = (
    "both swap protocols scored, the regime called; interchange-guided, or a beam over both "
    "protocols' shortlist verified on the pruned model when both are high"
)
AUTO_SOURCE = "the paper's decision rule (Garcia 2026, section 4), acted on"
OPS = ("remove", "merge")
UNCERTIFIED = ("random", "reverse")
ORACLE_METRICS = ("ppl", "kl")


def names() -> list[str]:
    """Every name ``--protocol`` accepts: the criteria and the ``auto`` policy."""
    return sorted([*criteria_mod.names(), AUTO])


@dataclass(frozen=True)
class AdaptiveSettings:
    """How adaptive calibration spends windows.

    Attributes:
        target: stop when the chosen set's bootstrap frequency is at least this.
        tranche: windows added per round (the first round probes every pair).
        max_windows: never probe more windows than this.
        n_boot: bootstrap resamples per round.
        seed: seed of the window order and of the bootstrap.
    """

    target: float
    tranche: int
    max_windows: int
    n_boot: int = N_BOOT
    seed: int = 0

    def check(self) -> None:
        """Raise a one-line :class:`SwappruneError` for settings that cannot work."""
        if not 0 < self.target <= 1:
            raise SwappruneError(f"stability target must be in (0, 1], got {self.target}")
        if self.tranche < 2:
            raise SwappruneError(f"a tranche needs at least 2 windows, got {self.tranche}")
        if self.max_windows < self.tranche:
            raise SwappruneError(
                f"maximum of {self.max_windows} windows is smaller than one tranche of "
                f"{self.tranche}; raise the maximum or lower the tranche"
            )
        if self.n_boot < 10:
            raise SwappruneError(f"need at least 10 bootstrap resamples, got {self.n_boot}")


def adaptive_settings(calibration: CalibrationConfig) -> AdaptiveSettings:
    """The tranche settings of the calibration section (``--adaptive``)."""
    # A pool smaller than a tranche is probed in one round.
    return AdaptiveSettings(
        target=calibration.target_frequency,
        tranche=min(calibration.tranche, calibration.prompts),
        max_windows=calibration.prompts,
        seed=calibration.seed,
    )


@dataclass(frozen=True)
class SelectionSpec:
    """Everything a selection needs, checked.

    Attributes:
        name: the ``--protocol`` given (a criterion name, or ``auto``).
        policy: ``fixed``, ``adaptive`` or ``auto``.
        criterion: the criterion ranking blocks (for ``auto``: interchange, which it
            ranks by before any verification).
        strategy: the strategy object, configured; ``strategy_name`` its spec.
        constraints: which blocks may go, and (``constraints.serve``) which removal sets
            keep the serving runtimes' layer-type pattern in phase; ``budget``: how many.
        op, merge: ``remove`` or ``merge`` with that rule.
        seed: window pick, bootstrap and ``random`` seed.
        oracle_metric, max_oracle_calls, beam_seeds: model queries.
        positions, batch_size, tokens: how probes run.
        adaptive: tranche settings of the ``adaptive`` and ``auto`` policies.
        stability_threshold, n_boot: the selection's bootstrap.
        certify, certify_sets, certify_floor, certify_delta: the regret certificate
            (:mod:`swapprune.select.certificate`); merges are not certified.
        auto_shortlist: where ``auto``'s both-high beam takes its shortlist from.
        landscape: the exact landscape's top sets at this budget (``--landscape``), which
            join the certificate's reference.
    """

    name: str
    policy: str
    criterion: criteria_mod.Criterion
    strategy: Strategy
    strategy_name: str
    constraints: Constraints
    budget: int
    op: str = "remove"
    merge: str | None = None
    seed: int = 0
    oracle_metric: str = "ppl"
    max_oracle_calls: int = 400
    beam_seeds: int = 12
    positions: str = "all"
    batch_size: int = 8
    tokens: int = 128
    adaptive: AdaptiveSettings | None = None
    stability_threshold: float = 0.5
    n_boot: int = N_BOOT
    certify: bool = True
    certify_sets: int = 6
    certify_floor: float = 0.05
    certify_delta: float | None = None
    auto_shortlist: str = "swap"
    landscape: tuple[tuple[int, ...], ...] = ()

    @property
    def num_layers(self) -> int:
        return self.constraints.num_layers

    @property
    def serve(self) -> ServeConstraint | None:
        """The in-phase constraint (``--serve``), or ``None``."""
        return self.constraints.serve

    @property
    def probes(self) -> tuple[str, ...]:
        """The probes this selection reads (``auto`` reads both swap protocols)."""
        return criteria_mod.SWAP if self.policy == AUTO else self.criterion.probes

    @property
    def needs_windows(self) -> bool:
        """Whether the selection runs anything on calibration windows."""
        c, s = self.criterion, self.strategy
        return bool(
            self.policy != "fixed" or c.probes or c.needs_model or s.queries_model or c.tiebreak
        )

    def for_criterion(self, name: str, own_strategy: bool = False) -> SelectionSpec:
        """The same request ranked by criterion ``name``.

        With the strategy asked for (unless ``auto``), or, with ``own_strategy``, the
        criterion's own default (Block Influence's set in the certificate's reference).
        """
        crit = criteria_mod.get(name)
        keep = self.name != AUTO and not own_strategy
        strategy = _strategy(self.strategy_name if keep else None, crit, self)
        return replace(
            self,
            name=name,
            policy="fixed",
            criterion=crit,
            strategy=strategy[0],
            strategy_name=strategy[1],
        )


def _strategy(spec: str | None, crit, limits) -> tuple[Strategy, str]:
    name = spec or crit.default_strategy
    strategy = get_strategy(name)
    if isinstance(strategy, Beam):
        strategy.max_calls = limits.max_oracle_calls
        strategy.seeds = limits.beam_seeds
    missing = strategy.needs - crit.provides - {"oracle"}
    if missing:
        what = sorted(missing)[0]
        raise SwappruneError(
            f"strategy '{strategy.name}' needs {what.replace('_', ' ')}, which criterion "
            f"'{crit.name}' cannot provide; criteria that can: "
            f"{', '.join(criteria_mod.providers(what))}"
        )
    return strategy, name


def resolve(select: SelectConfig, calibration: CalibrationConfig):
    """Check every name and setting that needs no model; returns ``(criterion, strategy, name)``."""
    if select.protocol == AUTO:
        crit = criteria_mod.get("interchange")
        if select.op != "remove":
            raise SwappruneError("--protocol auto removes blocks; it does not merge")
    else:
        if select.protocol not in criteria_mod.CRITERIA:
            raise unknown_name("criterion", select.protocol, names())
        crit = criteria_mod.get(select.protocol)
    strategy, name = _strategy(select.strategy, crit, select)
    if select.op not in OPS:
        raise unknown_name("operation", select.op, OPS)
    if select.op == "merge":
        get_merge(select.merge)
    if select.oracle not in ORACLE_METRICS:
        raise unknown_name("oracle metric", select.oracle, ORACLE_METRICS)
    if select.protect_first < 0 or select.protect_last < 0:
        raise SwappruneError("--protect-first/--protect-last must be >= 0")
    if select.budget is not None and select.budget <= 0:
        raise SwappruneError(f"budget must be >= 1, got {select.budget}")
    if (
        calibration.adaptive == "on"
        and select.protocol != AUTO
        and crit.name not in criteria_mod.SWAP
    ):
        raise SwappruneError(
            f"adaptive calibration works with the swap criteria {', '.join(criteria_mod.SWAP)} and auto, "
            f"not '{crit.name}'; use --adaptive off"
        )
    return crit, strategy, name


def adaptive_on(select: SelectConfig, calibration: CalibrationConfig) -> bool:
    """Whether the selection probes in tranches of a window pool (``--adaptive``).

    ``auto`` (the default setting) turns it on for ``--protocol auto``, and for the swap
    criteria when the cut is certified (the certificate is what stops the tranches).
    """
    if calibration.adaptive != "auto":
        return calibration.adaptive == "on"
    swap = select.protocol in criteria_mod.SWAP and select.certify and select.op == "remove"
    return select.protocol == AUTO or swap


def build(
    select: SelectConfig,
    calibration: CalibrationConfig,
    num_layers: int,
    scores_given: bool = False,
    serve: ServeConstraint | None = None,
) -> SelectionSpec:
    """The checked spec of these settings for a model of ``num_layers`` blocks.

    Args:
        select, calibration: the configuration sections.
        num_layers: the model's depth.
        scores_given: probes come from elsewhere (``--scores``, a ``score`` stage,
            ``compare``'s shared probes): no adaptive tranches then.
        serve: the in-phase constraint (:func:`swapprune.select.constraints.resolve`); a
            budget that no eligible set meets is refused here.
    """
    crit, strategy, strategy_name = resolve(select, calibration)
    if select.budget is None:
        raise SwappruneError("a budget is required: --budget N (blocks to remove or merge)")
    # A linear patch folds into the block before each removed span: block 0 stays.
    first = max(select.protect_first, 1) if select.patch != "none" else select.protect_first
    cons = Constraints(num_layers, first, select.protect_last, serve)
    strategy.check(select.budget, cons)
    if serve is not None:
        serve.check(select.budget, cons)
    tranches = adaptive_on(select, calibration) and not (scores_given or select.scores)
    if tranches and strategy.queries_model and select.protocol != AUTO:
        if calibration.adaptive == "on":
            raise SwappruneError(
                f"adaptive calibration resamples the selection, and strategy '{strategy.name}' "
                "queries the model; use --adaptive off"
            )
        tranches = False  # the default setting: fixed windows for a model-querying strategy
    if tranches and calibration.prompts < 2:
        tranches = False  # one window cannot be resampled: probe it as it is
    policy = AUTO if select.protocol == AUTO else "adaptive" if tranches else "fixed"
    adaptive = None
    if tranches:
        adaptive = adaptive_settings(calibration)
        adaptive.check()
    return SelectionSpec(
        name=select.protocol,
        policy=policy,
        criterion=crit,
        strategy=strategy,
        strategy_name=strategy_name,
        constraints=cons,
        budget=select.budget,
        op=select.op,
        merge=select.merge if select.op == "merge" else None,
        seed=calibration.seed,
        oracle_metric=select.oracle,
        max_oracle_calls=select.max_oracle_calls,
        beam_seeds=select.beam_seeds,
        positions=calibration.positions,
        batch_size=calibration.batch_size,
        tokens=calibration.tokens,
        adaptive=adaptive,
        stability_threshold=select.stability_threshold,
        # Merges change weights (their sets are not removals), and the sanity baselines
        # are meant to be what they are: neither is certified.
        certify=select.certify and select.op == "remove" and crit.name not in UNCERTIFIED,
        certify_sets=select.certify_sets,
        certify_floor=select.certify_floor,
        certify_delta=select.certify_delta,
        auto_shortlist=select.auto_shortlist,
    )
