"""Analysis: tables computed from a finished run's results (never a store, never a config to instantiate).

``tables`` (everything the report shows, from the run directory: ``analyse(RunDir) -> Analysis``),
``recommend`` (operating points with intervals, LOCO, categories, cross-dataset transfer), ``stats`` (t intervals,
bootstrap, paired tests, Holm), ``holdout`` (split-half coverage of the printed intervals), ``calibration`` (gold vs non-gold scores), ``attribution`` (why gold memories
were missed), ``embedders`` (embedders compared: operating points beside score bands), ``transfer``
(thresholds that transfer: each family of cuts' F1 regret, LOCO and across embedders), ``compare``
(two runs side by side).
"""
