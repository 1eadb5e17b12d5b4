"""Calibration windows and the token-id cache."""
