"""Recall strategies: pure selections of what to inject, one module per family.

``spec`` (the contract: signature, ``Selection``, ``StrategySpec``), ``vector`` (limit, threshold,
hybrid, token budget, routing), ``baselines`` (full context, recency), ``lexical`` (keyword, BM25,
RRF), ``tiers`` (dual-tier memory). A strategy is one function here plus one YAML in
``configs/strategy/``.
"""
