"""recallbench: measure memory-recall strategies and vector stores on labelled conversations."""

__version__ = "0.1.0"
