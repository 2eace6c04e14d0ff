"""The command line: the only code that knows Hydra. ``sweep`` (``python -m bench``), ``config``."""
