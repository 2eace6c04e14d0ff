"""Embedders: text -> float32 L2-normalised vectors. One module per embedder plus a cache wrapper."""
