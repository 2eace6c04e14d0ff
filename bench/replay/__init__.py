"""Replay: the store is asked once per question and the answers are kept (the trace).

Owns ``trace.py`` (one search per question, store time only, exact re-scoring of what came back, the
embeddings it needs), ``visibility.py`` (which memories a question may see: its conversation, before it
was asked), and reading other systems' rankings as traces: ``trec.py`` (TREC run files and qrels) and
``rankings.py`` (JSON rankings, LongMemEval-style); ``live.py`` (live replay, ``replay: live``: writes in timeline
order without waiting, each question at its time; a normal trace plus per-write and per-question records).

May import: bench.types, bench.run, bench.output, bench.progress, bench.data, bench.embedders,
bench.backends. Never: selection, metrics, analysis, report, evaluation, cli, tools.
"""
