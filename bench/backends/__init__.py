"""Vector stores behind one contract (see base.py). One module per store, one YAML per store."""
