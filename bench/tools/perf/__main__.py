"""``python -m bench.tools.perf``: ``make bench``."""

from bench.cli.common import entry
from bench.tools.perf import main

raise SystemExit(entry(main))
