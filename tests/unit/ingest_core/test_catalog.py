"""Table and job declarations: one place, derived paths, validation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ingest_core.catalog import Catalog, get_catalog
from ingest_core.settings import PlatformSettings

pytestmark = pytest.mark.unit


def test_paths_are_derived_from_declarations(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("INGEST_HOME", str(tmp_path))
    settings = PlatformSettings()
    catalog = get_catalog()
    assert catalog.table("bronze_events").path(settings) == (
        tmp_path / "data" / "bronze" / "bronze_events"
    )
    assert catalog.job("bronze_ingest").checkpoint(settings) == (
        tmp_path / "checkpoints" / "bronze_ingest"
    )


def test_unknown_names_list_the_declared_ones() -> None:
    with pytest.raises(KeyError, match="bronze_events"):
        get_catalog().table("silver_nothing")


def _declaration(**job_overrides: object) -> dict:
    job = {
        "module": "spark_jobs.bronze_ingest",
        "source": {"kind": "kafka", "topics": ["orders"]},
        "sink": "bronze_events",
        "outputs": ["bronze_events"],
        "mode": "always_on",
        "default_trigger": "available-now",
    } | job_overrides
    return {
        "tables": {
            "bronze_events": {
                "layer": "bronze",
                "schema_from": "spark_jobs.bronze_ingest:to_bronze",
            }
        },
        "jobs": {"bronze_ingest": job},
    }


def test_job_writing_an_undeclared_table_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"writes undeclared table\(s\) \['bronze_other'\]"):
        Catalog.model_validate(
            _declaration(sink="bronze_other", outputs=["bronze_events", "bronze_other"])
        )
    with pytest.raises(ValidationError, match="sink 'bronze_other' is not in its outputs"):
        Catalog.model_validate(_declaration(sink="bronze_other"))


def test_invalid_topic_name_is_refused() -> None:
    with pytest.raises(ValidationError, match="invalid Kafka topic names"):
        Catalog.model_validate(
            _declaration(source={"kind": "kafka", "topics": ["orders; rm -rf /"]})
        )


def test_table_name_must_carry_its_layer() -> None:
    with pytest.raises(ValidationError, match="must be named silver_<entity>"):
        Catalog.model_validate(
            {"tables": {"orders": {"layer": "silver", "schema_from": "contract"}}, "jobs": {}}
        )


def test_bronze_subscribes_to_exactly_the_contract_topics() -> None:
    from ingest_core.catalog import KafkaSourceSpec
    from ingest_core.contracts import TOPICS

    source = get_catalog().job("bronze_ingest").source
    assert isinstance(source, KafkaSourceSpec)
    assert sorted(source.topics) == sorted(TOPICS)


def test_every_contract_lands_in_a_declared_silver_table() -> None:
    from ingest_core.contracts import CONTRACTS

    for contract in CONTRACTS.values():
        assert get_catalog().table(contract.silver_table).layer == "silver"


def test_work_from_must_be_inputs_and_defaults_to_inputs_not_written() -> None:
    declared = _declaration(inputs=["bronze_events"], work_from=["bronze_events"])
    with pytest.raises(ValidationError, match=r"work_from \['bronze_events'\] are not in its"):
        Catalog.model_validate(_declaration(work_from=["bronze_events"]))
    assert Catalog.model_validate(declared).job("bronze_ingest").new_data_inputs == [
        "bronze_events"
    ]
    assert get_catalog().application("late_corrections").new_data_inputs == [
        t
        for t in get_catalog().application("late_corrections").inputs
        if t not in get_catalog().application("late_corrections").outputs
    ]


def test_driver_java_options_are_single_jvm_options_and_never_the_heap_maximum() -> None:
    ok = Catalog.model_validate(_declaration(driver_java_options=["-XX:+UseSerialGC", "-Xms64m"]))
    assert ok.job("bronze_ingest").driver_java_options == ["-XX:+UseSerialGC", "-Xms64m"]
    with pytest.raises(ValidationError, match="the heap's maximum is driver_memory"):
        Catalog.model_validate(_declaration(driver_java_options=["-Xmx2g"]))
    with pytest.raises(ValidationError, match="is not one -X JVM option"):
        Catalog.model_validate(_declaration(driver_java_options=["-XX:+UseSerialGC -Dx=1"]))
    with pytest.raises(ValidationError, match="driver_memory"):
        Catalog.model_validate(_declaration(driver_memory="lots"))


def test_output_files_per_batch_is_positive_and_only_for_kafka_into_delta() -> None:
    ok = Catalog.model_validate(_declaration(output_files_per_batch=2))
    assert ok.job("bronze_ingest").output_files_per_batch == 2
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Catalog.model_validate(_declaration(output_files_per_batch=0))
    kafka_sink = {"kind": "kafka", "topic_setting": "alerts.topic"}
    with pytest.raises(ValidationError, match="applies to a job reading Kafka into a Delta"):
        Catalog.model_validate(_declaration(sink=kafka_sink, outputs=[], output_files_per_batch=2))
