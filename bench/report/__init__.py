"""Report: render a finished run directory as report.md, a self-contained report.html and PNG figures.

Computes and writes no table: the analysis stage (``bench.analysis.tables.write_tables``) computes and saves them
before the report renders what it returns; the files come from ``bench.results.rundir``. ``markdown`` (sections and the
report), ``html`` (report.html), ``plots`` (figures), ``strategies`` (the strategy sections), ``names`` (labels and the
legend; short names are a mapping passed to every renderer), ``significance`` (the significance table, also
``recallbench compare``'s). ``recallbench report RUN_DIR`` rebuilds the tables and the report.
"""
