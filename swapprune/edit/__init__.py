"""What is done to a model: surgery, merging, healing, quantization."""
