"""Recall strategies: pure selections of what to inject, one module per family.

``spec`` (the contract: signature, ``Selection``, ``StrategySpec``), ``vector`` (limit, threshold,
hybrid, token budget, routing), ``baselines`` (full context, recency), ``lexical`` (keyword, BM25,
RRF), ``tiers`` (dual-tier memory). A strategy is one function here, whose family (``spec.FAMILIES``) and
inputs (``thresholded``, ``uses_store``, ``stateful``, ``needs_tokens``) are declared next to it with
``@spec.strategy(family=..., ...)``, plus one YAML in ``configs/strategy/`` (its name, role filter and
parameters); the tests and the ``strategies`` experiment find it there.
"""
