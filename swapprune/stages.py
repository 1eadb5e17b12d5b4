"""Deprecated location of :mod:`swapprune.pipeline.stages`, kept importable for one release."""

from swapprune.pipeline.checks import check, read_facts  # noqa: F401
from swapprune.pipeline.stages import *  # noqa: F403
from swapprune.pipeline.stages import Checked, Loaded  # noqa: F401
