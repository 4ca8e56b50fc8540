"""Benchmarks run side by side with their references; results go to docs/PERFORMANCE.md."""
