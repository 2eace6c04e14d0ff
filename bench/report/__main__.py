import sys

from bench.report.markdown import main

sys.exit(main())
