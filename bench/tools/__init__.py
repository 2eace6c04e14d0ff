"""QA tools built on the pipeline, never inside it: regress, perf, stores, load, harden."""
