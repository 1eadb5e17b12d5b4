"""Everything GGUF: the conversion cache, the header bounds, the source, the writer, its self-check and the save stage."""
