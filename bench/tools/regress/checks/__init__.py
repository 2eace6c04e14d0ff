"""The gate's four check families, one module each, every check a row of ``CHECK_COLUMNS``: ``coverage`` (are the runs
comparable), ``quality`` (the paired sign-flip test with Holm's correction), ``tokens`` (the budget ratio) and
``latency`` (store / exact against the baseline's, with its noise limit). ``common``: the operating points they are
taken at and the row they write.
"""
