"""The quality gates' Spark-free parts: their rules (:mod:`.rules`) and their state, what is
pending and what passed (:mod:`.state`)."""
