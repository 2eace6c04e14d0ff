"""Report: render a finished run directory as report.md, a self-contained report.html and PNG figures.

``markdown`` (sections and the report), ``html`` (report.html), ``plots`` (figures),
``strategies`` (the strategy sections). ``python -m bench.report RUN_DIR`` rebuilds a report.
"""
