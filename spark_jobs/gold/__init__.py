"""The Gold jobs: ``gold_aggregate`` (the streaming windows, sessions and customer metrics),
``late_corrections`` (late events applied to Gold) and ``gold_backfill`` (an interval
recomputed). No job imports another; what they share is :mod:`spark_jobs.gold.common`
(``tests/unit/test_layering.py``)."""
