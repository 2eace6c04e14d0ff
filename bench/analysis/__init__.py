"""Analysis: tables computed from a finished run's results (never a store, never a config).

``recommend`` (operating points with CIs, LOCO, categories, transfer), ``stats`` (bootstrap,
paired tests, Holm), ``calibration`` (gold vs non-gold scores), ``attribution`` (why gold memories
were missed), ``compare`` (two runs side by side).
"""
