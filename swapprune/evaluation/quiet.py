"""Keep lm-eval's known-harmless log noise out of swapprune's output."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

# Messages lm-eval logs on every in-memory run of the pack; none is actionable.
_NOISE = (
    "Custom kwargs can be passed",  # every custom_dataset task, every load
    "`pretrained` model kwarg is not of type `str`",  # in-memory model, by design
    "Passed an already-initialized model",
)
_LOGGERS = ("lm_eval.api.task", "lm_eval.models.huggingface", "lm_eval.tasks._factory")


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(n in msg for n in _NOISE)


@contextlib.contextmanager
def quiet_lm_eval(level: int | None = None) -> Iterator[None]:
    """Drop lm-eval's known noise; with ``level``, also raise the lm_eval log level.

    Args:
        level: If given, the minimum level for the ``lm_eval`` logger hierarchy
            while inside (e.g. ``logging.ERROR`` while indexing YAMLs).
    """
    root = logging.getLogger("lm_eval")
    old = root.level
    flt = _DropNoise()
    loggers = [logging.getLogger(n) for n in _LOGGERS]
    for lg in loggers:
        lg.addFilter(flt)
    if level is not None:
        root.setLevel(level)
    try:
        yield
    finally:
        root.setLevel(old)
        for lg in loggers:
            lg.removeFilter(flt)
