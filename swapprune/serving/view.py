"""How serving runtimes assign each layer's attention type to a saved pruned artifact.

swapprune writes an explicit ``layer_types`` of the kept layers' own types, and
transformers honours it. Other runtimes do not all read it: some derive the
sliding/full pattern from the layer index, so a cut that moves a full-attention
layer to another slot is served with the wrong attention there. This module
holds, as data, what each runtime does for each family (:data:`SERVING`, every
entry with the runtime version and the file it was read from), and one pure
derivation, :func:`serving_view`: for the saved config (``config.json``) or the
GGUF metadata, and the kept layers' own types, the type and window every runtime
will use for each kept layer, and where that differs from the layer's own type.

Runtimes (keys of :data:`RUNTIMES`):

- ``transformers``: a safetensors checkpoint read by ``from_pretrained(dir)``;
- ``transformers-gguf``: a GGUF file read by ``from_pretrained(dir, gguf_file=...)``;
- ``vllm``: a safetensors checkpoint served by vLLM (0.33.0 ships no GGUF loader);
- ``llama.cpp``: a GGUF file (from swapprune's writer, or from converting the
  checkpoint with llama.cpp's ``convert_hf_to_gguf.py``).

Index rules agree across runtimes where they apply: with period ``P``, layer
``i`` (0-based) is full attention when ``(i + 1) % P == 0`` and sliding
otherwise (transformers ``(i + 1) % P``, llama.cpp ``il % P < P - 1``, vLLM
GPT-OSS ``i % 2 == 0`` for sliding).

No torch here: the CLI and the model card use it before any model loads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from swapprune.serving.rules import (
    FULL,
    GGUF_MODEL_TYPES,
    GGUF_SWA_LIST,
    LAYER_TYPES,
    RUNTIMES,
    SERVING,
    SLIDING,
    Rule,
    rule_for,
)

__all__ = [
    "FULL",
    "RUNTIMES",
    "SERVING",
    "SLIDING",
    "ArtifactFacts",
    "ServingView",
    "artifact_facts",
    "derived_types",
    "rule_for",
    "served_types",
    "serving_view",
]


@dataclass(frozen=True)
class LayerServing:
    """One kept layer as one runtime serves it."""

    index: int  # position in the pruned model
    original: int | None  # index in the unpruned model, when known
    own: str  # the layer's own type (what it was trained as)
    served: str
    window: int | None

    @property
    def differs(self) -> bool:
        return self.served != self.own


@dataclass
class RuntimeView:
    """What one runtime does with the pruned artifact."""

    runtime: str
    rule: Rule
    layers: list[LayerServing]
    refused: str | None = None  # why the runtime refuses to load it
    warnings: list[str] = field(default_factory=list)  # changes the cut causes beyond types
    notes: list[str] = field(default_factory=list)  # facts for the card, not caused by the cut

    @property
    def differs(self) -> list[LayerServing]:
        return [] if self.refused else [ly for ly in self.layers if ly.differs]


@dataclass
class ServingView:
    """The serving view of a pruned artifact: one :class:`RuntimeView` per runtime."""

    model_type: str
    artifact: str  # "safetensors" or "gguf"
    runtimes: dict[str, RuntimeView]
    known: bool = True  # False: the family has no entry in SERVING

    def problems(self) -> dict[str, str]:
        """Runtime -> one phrase, for every runtime that refuses or mis-serves a layer."""
        out = {}
        for name, view in self.runtimes.items():
            if view.refused:
                out[name] = f"refuses to load it ({view.refused})"
            elif view.differs or view.warnings:
                what = list(view.warnings)
                if view.differs:
                    flips = ", ".join(_flip(ly) for ly in view.differs)
                    what.insert(
                        0, f"serves {len(view.differs)} layer(s) with another type: {flips}"
                    )
                out[name] = "; ".join(what)
        return out

    def warning(self) -> str | None:
        """One line for the run summary, or ``None`` when every runtime serves the cut as checked."""
        problems = self.problems()
        if not problems:
            return None
        return "serving: " + "; ".join(f"{rt} {what}" for rt, what in problems.items())

    def markdown(self) -> list[str]:
        """Model-card lines: one table row per kept layer, one column per runtime."""
        if not self.runtimes:
            return [
                f"Serving view: no runtime rules are recorded for model_type `{self.model_type}` "
                "(add it to `swapprune.serving.view.SERVING`).",
            ]
        names = list(self.runtimes)
        head = ["layer", "original", "own type", *names]
        lines = [
            f"Serving view ({self.artifact}): the attention each runtime uses for each kept layer "
            "(`S` sliding, `F` full; **bold** where it differs from the layer's own type).",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head),
        ]
        first = next(iter(self.runtimes.values()))
        for row, own in enumerate(first.layers):
            cells = [
                str(own.index),
                "" if own.original is None else str(own.original),
                _abbr(own.own),
            ]
            for name in names:
                view = self.runtimes[name]
                if view.refused:
                    cells.append("refused")
                    continue
                ly = view.layers[row]
                text = _abbr(ly.served) + (f" ({ly.window})" if ly.window else "")
                cells.append(f"**{text}**" if ly.differs else text)
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        for name, view in self.runtimes.items():
            parts = [view.rule.note, *view.warnings, *view.notes, view.refused or ""]
            extra = "; ".join(p for p in parts if p)
            lines.append(f"- {name}: {view.rule.source.cite()}" + (f" ({extra})" if extra else ""))
        return lines


def _abbr(kind: str) -> str:
    return "S" if kind == SLIDING else "F" if kind == FULL else kind


def _flip(ly: LayerServing) -> str:
    where = f"{ly.index}" + (f" (orig {ly.original})" if ly.original is not None else "")
    return f"{where} {_abbr(ly.own)}->{_abbr(ly.served)}"


@dataclass(frozen=True)
class ArtifactFacts:
    """What a runtime can read from a saved artifact's config or GGUF metadata."""

    model_type: str
    artifact: str
    num_layers: int
    window: int | None
    lists: Mapping[str, Sequence[str]]  # per-layer lists present, by key (normalised types)
    config: Mapping[str, Any]


def artifact_facts(config: Mapping[str, Any]) -> ArtifactFacts:
    """Read a ``config.json`` dict or a GGUF metadata dict (``{key: value}``).

    A GGUF dict is recognised by its ``general.architecture`` key. Per-layer
    lists are normalised to ``full_attention`` / ``sliding_attention``.
    """
    arch = config.get("general.architecture")
    if arch is not None:
        arch = str(arch)
        n = int(config.get(f"{arch}.block_count", 0))
        pattern = config.get(f"{arch}.{GGUF_SWA_LIST}")
        lists = {}
        if isinstance(pattern, (list, tuple)):
            lists[GGUF_SWA_LIST] = [SLIDING if bool(v) else FULL for v in pattern]
        window = config.get(f"{arch}.attention.sliding_window")
        return ArtifactFacts(
            model_type=GGUF_MODEL_TYPES.get(arch, arch),
            artifact="gguf",
            num_layers=n,
            window=int(window) if window else None,
            lists=lists,
            config=config,
        )
    text = config.get("text_config") or config
    types = text.get(LAYER_TYPES)
    window = text.get("sliding_window")
    return ArtifactFacts(
        model_type=str(text.get("model_type", "")),
        artifact="safetensors",
        num_layers=int(text.get("num_hidden_layers") or text.get("n_layer") or 0),
        window=int(window) if window else None,
        lists={LAYER_TYPES: list(types)} if types else {},
        config=text,
    )


def derived_types(rule: Rule, n: int, facts: ArtifactFacts | None = None) -> list[str]:
    """The types ``rule`` derives from the index alone for ``n`` layers (no list read)."""
    window = facts.window if facts else None
    cfg = facts.config if facts else {}
    if rule.derive == "period":
        if rule.needs_window and facts is not None and not window:
            return [FULL] * n
        p = rule.period or 1
        return [FULL if (i + 1) % p == 0 else SLIDING for i in range(n)]
    if rule.derive == "leading_full":
        use = cfg.get("use_sliding_window", False) and window
        mwl = int(cfg.get("max_window_layers", n) or 0)
        return [SLIDING if use and i >= mwl else FULL for i in range(n)]
    if rule.derive == "uniform":
        return [SLIDING if window else FULL] * n
    return [FULL] * n


def served_types(rule: Rule, facts: ArtifactFacts, runtime: str) -> list[str]:
    """The type ``runtime`` uses for each of the artifact's layers under ``rule``."""
    n = facts.num_layers
    key = rule.honours
    if runtime == "llama.cpp" and facts.artifact == "safetensors":
        # Served after llama.cpp's own converter, which writes the list for some families only.
        if rule.converter_writes_list and facts.lists.get(LAYER_TYPES):
            return list(facts.lists[LAYER_TYPES])
        key = None
    if key and len(facts.lists.get(key, ())) == n:
        return list(facts.lists[key])
    return derived_types(rule, n, facts)


def default_runtimes(artifact: str) -> list[str]:
    """Runtimes that read an artifact of this kind (llama.cpp reads a checkpoint once converted)."""
    if artifact == "gguf":
        return ["transformers-gguf", "llama.cpp"]
    return ["transformers", "vllm", "llama.cpp"]


def serving_view(
    config: Mapping[str, Any],
    kept_types: Sequence[str],
    *,
    kept: Sequence[int] | None = None,
    num_layers_before: int | None = None,
    runtimes: Sequence[str] | None = None,
) -> ServingView:
    """Per kept layer, the attention type and window each runtime uses for the saved artifact.

    Args:
        config: the pruned artifact's ``config.json`` dict or GGUF metadata dict.
        kept_types: the kept layers' own types, in the pruned order.
        kept: their original indices (for the card), when known.
        num_layers_before: the unpruned layer count, for runtimes that pick the
            attention scale by layer count.
        runtimes: which runtimes to report; by default those that read this kind
            of artifact and have a rule for the family.

    Returns:
        The view; for a family missing from :data:`SERVING` it lists no runtime
        (``known`` is false) rather than guess.
    """
    facts = artifact_facts(config)
    n = len(kept_types)
    if facts.num_layers and facts.num_layers != n:
        raise ValueError(f"config has {facts.num_layers} layers but {n} kept types were given")
    facts = ArtifactFacts(
        facts.model_type, facts.artifact, n, facts.window, facts.lists, facts.config
    )
    family = SERVING.get(facts.model_type)
    if family is None:
        return ServingView(facts.model_type, facts.artifact, {}, known=False)
    reference = family.rules.get("transformers")
    # A family without a per-layer pattern: its layers are alike, so no cut can move a type;
    # a runtime that treats them otherwise (llama.cpp drops Mistral's window) is noted only.
    patterned = reference is not None and reference.derive in ("period", "leading_full")
    window = facts.window or family.default_window
    views: dict[str, RuntimeView] = {}
    for name in runtimes or default_runtimes(facts.artifact):
        rule = family.rules.get(name)
        if rule is None:
            continue  # this runtime does not serve the family (or not this kind of file)
        served = served_types(rule, facts, name)
        own = list(kept_types) if patterned else served
        layers = [
            LayerServing(
                index=i,
                original=None if kept is None else int(kept[i]),
                own=own[i],
                served=served[i],
                window=window if served[i] == SLIDING else None,
            )
            for i in range(n)
        ]
        view = RuntimeView(name, rule, layers)
        if name == "llama.cpp" and facts.artifact == "safetensors":
            writes = " (it writes the per-layer list)" if rule.converter_writes_list else ""
            view.notes.append(f"after llama.cpp's convert_hf_to_gguf.py{writes}")
        if not patterned and reference is not None:
            checked = derived_types(reference, n, facts)
            if served != checked:
                view.notes.append(
                    f"every layer {_abbr(served[0])} where transformers uses "
                    f"{_abbr(checked[0])}, with or without the cut"
                )
        if rule.refuses_mixed and len(set(kept_types)) > 1:
            view.refused = "mixed sliding/full layers"
        if rule.scale_layer_counts and num_layers_before is not None:
            before = num_layers_before in rule.scale_layer_counts
            if before != (n in rule.scale_layer_counts):
                view.warnings.append(
                    f"picks the attention scale by layer count ({list(rule.scale_layer_counts)}): "
                    f"{num_layers_before} -> {n} layers changes it"
                )
        views[name] = view
    return ServingView(facts.model_type, facts.artifact, views)
