"""Analysis: tables computed from a finished run's results (never a store, never a config to instantiate).

``tables`` (everything the report shows, from the run directory: ``analyse(RunDir) -> Analysis``; ``write_tables``
saves every table into ``analysis/``, the stage the CLI runs before the report), ``nextknob`` (what would help most),
``releases`` (two label releases of one corpus),
``recommend`` (operating points with intervals, LOCO stability, categories, a threshold across datasets), ``stats`` (t intervals,
bootstrap, paired tests, Holm), ``choose`` (choose a setting on A, score it on B: the one owner, used by recommend, transfer,
holdout and releases), ``holdout`` (split-half coverage of the printed intervals), ``calibration`` (gold vs non-gold scores), ``attribution`` (why gold memories
were missed), ``embedders`` (embedders compared: operating points beside score bands), ``transfer``
(thresholds that transfer: each family of cuts' F1 regret across corpora and embedders, and its
LOCO stability within one corpus), ``compare``
(two runs side by side).
"""
