import sys

from bench.tools.harden.run import main

sys.exit(main())
