"""Benchmarks: `python -m bench placement|quality|http ...` (see bench/__main__.py)."""
