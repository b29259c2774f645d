"""Raw Spark passthrough: Kafka -> Delta with no transformation, AvailableNow.

The baseline of the throughput benchmarks: the same topics, the same Spark configuration
(:func:`spark_jobs.session.spark_conf`, through the same ``spark-submit`` command the bench
builds for ``bronze_ingest``), the same ``maxOffsetsPerTrigger`` and starting offsets as
``bronze_ingest``; but the Kafka source's rows are written as they are (no columns added,
no partitioning, no checkpoint checks, no heartbeat listener).

Run by the bench as a spark-submit application::

    spark-submit ... bench/passthrough.py --table DIR --checkpoint DIR
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Drain the contract topics into a Delta table at ``--table`` and exit."""
    from ingest_core.catalog import KafkaSourceSpec, get_catalog
    from ingest_core.settings import get_settings
    from spark_jobs.session import build_spark_session

    parser = argparse.ArgumentParser(prog="passthrough", description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args(argv)

    settings = get_settings()
    job = get_catalog().job("bronze_ingest")
    assert isinstance(job.source, KafkaSourceSpec)
    spark = build_spark_session("bench_passthrough")
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka.bootstrap_servers)
        .option("subscribe", ",".join(settings.kafka.topic(t) for t in job.source.topics))
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    if job.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(job.max_offsets_per_trigger))
    query = (
        reader.load()
        .writeStream.format("delta")
        .outputMode("append")
        .option("checkpointLocation", args.checkpoint)
        .queryName("bench_passthrough")
        .trigger(availableNow=True)
        .start(args.table)
    )
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
