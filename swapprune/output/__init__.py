"""What a run writes: atomic files, the checkpoint and its self-check, the model card."""
