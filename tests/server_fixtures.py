"""Fixtures for seekdb and chroma servers (filled in by the stores work)."""
