"""Models: loading, the GGUF cache, architecture knowledge, fingerprints."""
