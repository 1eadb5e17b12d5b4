"""Statistics: bootstrap resampling, intervals and paired tests (pure numpy)."""
