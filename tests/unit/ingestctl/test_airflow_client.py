"""AirflowClient's polling over Airflow's REST API: a poll the API server does not answer in
time is "not yet", bounded by the wait's deadline; an error answer still fails at once. The
API is played by httpx's MockTransport (the e2e tests run the real one)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from ingestctl.airflow_runtime import AirflowClient, AirflowError

pytestmark = pytest.mark.unit


def _client(handler: Callable[[httpx.Request], httpx.Response]) -> AirflowClient:
    client = AirflowClient.__new__(AirflowClient)  # no login: the transport plays the API
    client.http = httpx.Client(
        base_url="http://airflow.invalid/api/v2", transport=httpx.MockTransport(handler)
    )
    return client


def test_a_run_state_poll_that_times_out_is_not_yet() -> None:
    asked: list[str] = []

    def api(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        if len(asked) <= 2:  # the state, then the tasks: the server too busy to answer
            raise httpx.ReadTimeout("timed out", request=request)
        if request.url.path.endswith("/taskInstances"):
            return httpx.Response(
                200, json={"task_instances": [{"task_id": "t", "state": "success"}]}
            )
        return httpx.Response(200, json={"state": "success"})

    changes: list[dict[str, str]] = []
    client = _client(api)
    assert client.wait_for_run("d", "r", timeout_s=30, on_change=changes.append) == "success"
    assert changes == [{"t": "success"}]
    assert len(asked) == 4


def test_a_run_that_never_answers_times_out_and_an_error_answer_fails_at_once() -> None:
    def silent(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(AirflowError, match="still running after 0 s"):
        _client(silent).wait_for_run("d", "r", timeout_s=0)

    def missing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"detail": "no such run"})

    with pytest.raises(AirflowError, match="404"):
        _client(missing).wait_for_run("d", "r", timeout_s=30)


def _runs_api(newest_after_unpause: str | None, log: list[str]):
    """The API of a DAG whose newest run is ``old`` until it is unpaused, then
    ``newest_after_unpause`` (None: still ``old``, as when the newest interval has a run)."""
    unpaused = [False]

    def api(request: httpx.Request) -> httpx.Response:
        log.append(f"{request.method} {request.url.path}")
        if request.method == "PATCH":
            unpaused[0] = True
            return httpx.Response(200, json={})
        if request.method == "POST":
            return httpx.Response(200, json={"dag_run_id": "manual__now"})
        newest = (newest_after_unpause if unpaused[0] else None) or "scheduled__old"
        return httpx.Response(200, json={"dag_runs": [{"dag_run_id": newest}]})

    return api


def test_a_demo_waits_for_the_run_unpausing_creates_never_an_earlier_one() -> None:
    """A second `make demo` in the same home waited on the first demo's run (Airflow's
    database keeps it): Silver and Gold were not refined for the records it sent."""
    from ingestctl.demo import _unpause_for_a_new_run

    log: list[str] = []
    client = _client(_runs_api("scheduled__new", log))
    assert _unpause_for_a_new_run(client, "d", wait_s=10) == "scheduled__new"
    assert "POST /api/v2/dags/d/dagRuns" not in log
    log.clear()
    client = _client(_runs_api(None, log))  # the newest interval already had its run
    assert _unpause_for_a_new_run(client, "d", wait_s=1) == "manual__now"
    assert log[-1] == "POST /api/v2/dags/d/dagRuns"


def test_a_backfill_runs_until_airflow_marks_it_completed() -> None:
    """``backfill_running`` reads ``GET /backfills?dag_id=``: one without ``completed_at``
    is running (Airflow would refuse another with ``AlreadyRunningBackfill``)."""
    listed: list[list[dict]] = [
        [],
        [{"id": 1, "completed_at": "2026-12-06T10:00:00Z"}],
        [{"id": 1, "completed_at": "2026-12-06T10:00:00Z"}, {"id": 2, "completed_at": None}],
    ]
    asked: list[httpx.URL] = []

    def api(request: httpx.Request) -> httpx.Response:
        asked.append(request.url)
        return httpx.Response(200, json={"backfills": listed[len(asked) - 1]})

    client = _client(api)
    assert [client.backfill_running("medallion_incremental") for _ in listed] == [
        False,
        False,
        True,
    ]
    assert asked[0].path == "/api/v2/backfills"
    assert asked[0].params["dag_id"] == "medallion_incremental"
