"""Drive the platform with events: real datasets replayed, or a synthetic generator.

``ingestctl replay olist PATH``, ``ingestctl replay uci-retail PATH`` and
``ingestctl generate`` map their input onto the event contracts (:mod:`ingest_core.contracts`),
optionally inject faults (:mod:`.faults`) and produce to Kafka (:mod:`.runner`).
"""
