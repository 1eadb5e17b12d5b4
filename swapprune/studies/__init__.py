"""Studies over many runs: compare (with its report and plots) and predictor validity."""
