"""Embedders: text -> float32 L2-normalised vectors, a document side and a query side (``base``). One module per
embedder, the content-keyed cache wrapper (``cache``), the tokenizer coverage check (``coverage``) and the API cost
estimate (``cost``)."""
