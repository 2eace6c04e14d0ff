"""``python -m bench.tools.regress``: ``make regress`` and ``make baseline``."""

from bench.cli.common import entry
from bench.tools.regress import main

raise SystemExit(entry(main))
