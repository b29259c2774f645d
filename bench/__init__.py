"""Benchmarks of the platform (issue 9): not tests, they never fail a build.

Every figure is a ratio against a baseline measured in the same run, or a median of several
runs with its spread; each measurement is one JSON line in ``bench/results/<run>.jsonl``.
Run ``make bench`` (small, under 10 minutes) or ``make bench ARGS=--full`` (1M events, the
demo's memory). See ``bench/README.md``.
"""
