"""Statistics: bootstrap resampling, intervals and paired tests (pure numpy).

The bootstrap's defaults live here, importable without numpy, so configuration
fields can name them.
"""

#: Bootstrap resamples, unless a setting says otherwise.
N_BOOT = 1000
#: Two-sided confidence level of every interval.
LEVEL = 0.95
#: Seed of the resampling indices.
SEED = 0
