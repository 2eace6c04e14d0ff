from bench.cli.common import entry
from bench.tools.harden.run import main

raise SystemExit(entry(main))
