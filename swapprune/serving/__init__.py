"""How serving runtimes assign layer types: their rules as data, the in-phase removal sets, the per-layer view of a saved artifact and its report."""
