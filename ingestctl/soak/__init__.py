"""The soak: the whole embedded platform under a steady stream and a seeded schedule of
infrastructure faults, then a verdict computed independently of the platform's own code.

* :mod:`ingestctl.soak.plan`: the fault kinds and the seeded, reproducible schedule (pure).
* :mod:`ingestctl.soak.stream`: the steady generated stream with the demo's data faults, and
  the soak's own log of every message it sent and every acknowledgement.
* :mod:`ingestctl.soak.faults`: what each fault kind does to the running platform, and how
  its recovery is recognised.
* :mod:`ingestctl.soak.verdict`: Bronze, Silver, Gold, alerts and reconciliation against a
  pandas computation over what Kafka holds; orphans; per-kind recovery.
* :mod:`ingestctl.soak.runner`: starts the platform, runs the schedule, drains, judges and
  writes the result file and report (``ingestctl soak``; docs/soak.md).
"""
