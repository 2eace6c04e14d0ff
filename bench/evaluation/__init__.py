"""LLM answer evaluation of a finished run (``recallbench answer``), beside the pipeline, not in it.

Owns ``llm.py`` (an OpenAI-compatible chat client with prices, retries and a content-keyed cache) and
``qa.py`` (what is asked, reader and judge, and how answers are scored per setting).

May import: bench.types, bench.output, bench.resources, bench.progress, bench.replay, bench.selection,
bench.metrics, bench.results, bench.analysis, bench.embedders.endpoint (the shared request loop).
Never: cli, tools.
"""
