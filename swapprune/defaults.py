"""Values the configuration's schema and the stages both read: pure constants.

The configuration (:mod:`swapprune.config`) names them as its fields' defaults and
choices, and imports nothing else of the package outside itself and
:mod:`swapprune.errors`; the stages read them here or through their own modules (the
probes through :mod:`swapprune.engine.orders`, the matched contract through
:mod:`swapprune.evaluation.contract`, the bootstrap's count through
:mod:`swapprune.stats`). A leaf: it imports nothing.
"""

#: Calibration text by default: the vendored WikiText-2 validation split.
CALIBRATION_SOURCE = "wikitext2-valid"
#: Calibration windows by default.
CALIBRATION_PROMPTS = 64
#: Tokens per calibration window by default.
CALIBRATION_TOKENS = 128

#: The swap-KL probes over pairs of blocks.
PAIR_PROBES = ("replacement", "interchange")
#: The probes over single blocks.
LAYER_PROBES = ("deletion",)
#: Every probe ``swapprune score`` measures.
PROBES = PAIR_PROBES + LAYER_PROBES

#: The matched WikiText-2 contract: words of the test split scored.
CONTRACT_WORDS = 5000
#: The matched WikiText-2 contract: window (context) length in tokens.
CONTRACT_MAX_LENGTH = 512

#: Bootstrap resamples, unless a setting says otherwise.
N_BOOT = 1000
