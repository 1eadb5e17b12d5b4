"""The serving view of a saved run: what each runtime does with each kept layer, for the card and summary.

For the checkpoint's saved ``config.json`` (transformers, vLLM, llama.cpp after
its converter) and, when one is written, ``model.gguf``'s metadata
(transformers' GGUF loader, llama.cpp), :func:`swapprune.serving.view.serving_view`
gives each kept layer's attention type and window per runtime.
:class:`ServingReport` turns that into model-card tables, a JSON record for
``metrics.json`` and one warning line per artifact where a runtime serves a
kept layer with another type than its own. No torch here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swapprune.gguf import writer
from swapprune.gguf.save import GGUF_NAME, gguf_card_lines, gguf_lines
from swapprune.model.arch import TYPE_KEY, get, text_config
from swapprune.serving.view import FULL, ServingView, serving_view

#: Artifact -> what the card calls it.
LABELS = {"safetensors": "the checkpoint (config.json)", "gguf": GGUF_NAME}


class ServingReport:
    """The serving views of one saved cut.

    Args:
        model_config: the in-memory pruned model's config (its ``layer_types`` are the
            kept layers' own types).
        plan: the applied plan (original indices, the depth before; its
            ``records.serve``, the in-phase constraint's record, if any).
        gguf: the GGUF record of :func:`~swapprune.gguf.save.save_gguf`, if any.
    """

    def __init__(self, model_config: Any, plan, gguf: dict | None = None):
        types = get(text_config(model_config), TYPE_KEY)
        # A config without per-layer types has one kind of layer: the view treats them alike.
        self.kept_types = list(types) if types else [FULL] * len(plan.kept)
        self.plan, self.gguf, self.serve = plan, gguf, plan.records.serve
        self.views: dict[str, ServingView] = {}

    def read(self, directory: Path) -> dict[str, ServingView]:
        """The views of the artifacts written in ``directory``."""
        saved = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        self.views = {"safetensors": self._view(saved)}
        gguf = directory / GGUF_NAME
        if self.gguf and self.gguf.get("written") is not False and gguf.is_file():
            self.views["gguf"] = self._view(writer.gguf_metadata(writer.read_gguf(gguf)))
        return self.views

    def _view(self, config: dict) -> ServingView:
        return serving_view(
            config,
            self.kept_types,
            kept=self.plan.kept,
            num_layers_before=self.plan.num_layers,
        )

    def card_lines(self, directory: Path) -> list[str]:
        """The model card's serving section (reads the artifacts in ``directory``)."""
        views = self.read(directory)
        lines = ["## Serving the cut", ""]
        lines += gguf_card_lines(self.gguf)
        serve = self.serve
        if serve is not None:
            how = "on by default while a GGUF is written" if serve.default else "--serve"
            lines.append(
                f"- **In phase for {', '.join(serve.runtimes)}** ({how}): "
                f"{serve.summary().removeprefix('serve: ')}."
            )
        lines += [f"- **{w}**" for w in self.warnings()]
        lines.append("")
        for artifact, view in views.items():
            lines += [f"### {LABELS[artifact]}", "", *view.markdown(), ""]
        return lines

    def warnings(self) -> list[str]:
        """One line per artifact that some runtime serves otherwise than checked."""
        out = []
        for artifact, view in self.views.items():
            w = view.warning()
            if w:
                out.append(f"serving ({LABELS[artifact]}):" + w.removeprefix("serving:"))
        return out

    def to_dict(self) -> dict:
        """The record of ``metrics.json``: per artifact and runtime, each kept layer's type."""
        return {
            artifact: {
                "model_type": view.model_type,
                "known": view.known,
                "runtimes": {
                    name: {
                        "served": [ly.served for ly in rv.layers],
                        "window": [ly.window for ly in rv.layers],
                        "differs": [
                            [ly.index, ly.original, ly.own, ly.served] for ly in rv.differs
                        ],
                        "refused": rv.refused,
                        "warnings": rv.warnings,
                        "source": rv.rule.source.cite(),
                    }
                    for name, rv in view.runtimes.items()
                },
                "warning": view.warning(),
            }
            for artifact, view in self.views.items()
        } | {"warnings": self.warnings()}


def summary_lines(metrics: dict, plan) -> list[str]:
    """What the run summary prints about serving: the constraint, the GGUF, the warnings."""
    serve = plan.records.serve
    lines = [serve.summary()] if serve is not None else []
    lines += gguf_lines(metrics.get("gguf"))
    lines += (metrics.get("serving") or {}).get("warnings", [])
    return lines
