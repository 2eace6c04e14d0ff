"""Selection: trace x strategies x thresholds -> per-question rows and the summary, no store opened.

Owns ``sweep.py`` (every strategy and threshold over a stored trace, vectorised, and the summary),
``formats.py`` (the injection formats A/B/C a selection is priced in, counted by ``bench.data.tokens``) and ``relevance.py`` (the out-of-fold P(relevant) of each candidate that the calibrated
strategies read).

May import: bench.types, bench.run, bench.output, bench.progress, bench.replay, bench.strategies,
bench.metrics. Never: analysis, report, evaluation, cli, tools.
"""
