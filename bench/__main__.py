import sys

from bench.cli.sweep import main

sys.exit(main())
