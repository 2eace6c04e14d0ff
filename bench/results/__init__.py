"""Results: the run directory a job writes and everything downstream reads.

Owns ``rundir.py``: the file names of a job, ``RunDir`` (the one reader of a finished run: rows,
summary, ranked tables, traces, corpus snapshot, strategies) and the collection of a run's jobs.

May import: bench.types, bench.run, bench.output, bench.data (snapshot), bench.strategies (spec),
bench.replay. Never: analysis, report, evaluation, cli, tools.
"""
