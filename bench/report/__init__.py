"""Report: render a finished run directory as report.md, a self-contained report.html and PNG figures.

Computes nothing: the tables come from ``bench.analysis.tables`` and the files from ``bench.rundir``.
``markdown`` (sections and the report), ``html`` (report.html), ``plots`` (figures),
``strategies`` (the strategy sections). ``recallbench report RUN_DIR`` rebuilds a report.
"""
