"""recallbench: measure memory-recall strategies and vector stores on labelled conversations.

The ``recallbench`` command is ``bench.cli.main``; from Python, ``bench.api`` (``run``, ``load_run``).
"""

__version__ = "0.1.0"  # the package version (pyproject.toml reads it from here)
