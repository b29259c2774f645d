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
