"""The command line: the only code that knows Hydra. ``main`` (the ``recallbench`` console script and its
subcommands; the in-process run behind ``bench.api.run``), ``sweep`` (the Hydra app, ``python -m bench``),
``config`` (compose/redact/build helpers)."""
