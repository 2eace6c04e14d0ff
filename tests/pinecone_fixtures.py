"""Fixtures for the loopback Pinecone data-plane server (filled in by the stores work)."""
