"""Default calibration settings, shared by the configuration and the library calls.

Pure constants: the configuration imports them without torch.
"""

SOURCE = "wikitext2-valid"  # the vendored WikiText-2 validation split
PROMPTS = 64  # windows
TOKENS = 128  # tokens per window
