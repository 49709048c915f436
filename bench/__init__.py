"""The benchmarks: each table a module run from the checkout (``python -m bench.<name>``),
all on one harness (bench/harness.py).  See docs/performance.md."""
