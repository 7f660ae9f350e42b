"""Benchmarks with baselines measured in the same run; ``python -m bench`` writes BENCHMARKS.md."""
