"""The Streaming page in a real browser: Airflow's API server with the platform's plugin,
``bronze_ingest`` running as the supervisor starts it (spark-submit) on the real broker
while payments keep arriving, and Playwright driving Debian's Chromium through Airflow's
login to the page. Anonymous requests to the page's API are refused; ``/metrics`` parses as
Prometheus text with a token from Airflow's ``/auth/token``.

Only the API server runs (no scheduler): the page reads heartbeats, checkpoints, Kafka and
Delta, not Airflow's database. SQLite keeps its start short."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ingest_core.contracts import TOPICS
from ingest_core.settings import PROJECT_ROOT, get_settings
from ingest_core.waiting import wait_until
from ingestctl.airflow_runtime import PASSWORD_FILE, airflow_environment, airflow_home, run_cli
from tests.conftest import free_ports

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: Where the test leaves its screenshot (``build/`` is ignored by git).
#: What the page shows for a missing value (an en dash).
NONE = "\u2013"
SCREENSHOT = PROJECT_ROOT / "build" / "test-artifacts" / "streaming_page.png"


@dataclass
class ApiServer:
    url: str
    password: str


def chromium() -> str:
    """Debian's Chromium (``make test`` installs it; Playwright cannot download browsers)."""
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("no `chromium` on PATH: run `make browser` (apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def platform_home(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An isolated platform (own home and topic prefix) on SQLite; yields the prefix."""
    from tests.e2e.conftest import isolate

    home = tmp_path_factory.mktemp("page") / "home"
    prefix = f"p{uuid.uuid4().hex[:8]}."
    with pytest.MonkeyPatch.context() as patch:
        # A job idle for 45 s counts as idle, not processing (job_activity), within the test.
        isolate(
            patch,
            home,
            prefix,
            kafka_bootstrap,
            INGEST_AIRFLOW__DATABASE="sqlite",
            INGEST_SUPERVISOR__HEARTBEAT_TIMEOUT_S="45",
        )
        try:
            yield prefix
        finally:
            get_settings.cache_clear()


@pytest.fixture(scope="module")
def api_server(platform_home: str) -> Iterator[ApiServer]:
    """``airflow api-server`` alone, with the platform's plugin and Airflow's login."""
    from ingest_core.processes import stop_tree

    run_cli(["db", "migrate"])
    port, worker_log, trigger_log = free_ports(3)
    env = {**os.environ, **airflow_environment(port, log_ports=(worker_log, trigger_log))}
    log = airflow_home() / "api-server.log"
    with log.open("ab") as out:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "airflow"), "api-server", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=PROJECT_ROOT,
        )
    url = f"http://127.0.0.1:{port}"
    passwords = airflow_home() / PASSWORD_FILE

    def answering() -> bool:
        assert server.poll() is None, log.read_text(errors="replace")[-3000:]
        try:
            healthy = httpx.get(f"{url}/api/v2/monitor/health", timeout=3).status_code == 200
        except httpx.HTTPError:
            return False
        return healthy and passwords.exists()

    try:
        wait_until(answering, 240, 2, what="the API server")
        import json

        yield ApiServer(url=url, password=json.loads(passwords.read_text())["admin"])
    finally:
        stop_tree(server.pid, 30)


@pytest.fixture(scope="module")
def running_ingest(platform_home: str) -> Iterator[threading.Event]:
    """bronze_ingest started by the supervisor (spark-submit, 1 s trigger) while a thread
    sends 20 payments a second; yields the event that stops the sender."""
    from ingest_platform import supervisor
    from ingestctl.producer import Message, produce
    from tests.integration.medallion import bronze_driver, payment

    command = bronze_driver()
    stop = threading.Event()
    bootstrap = get_settings().kafka.bootstrap_servers

    def send() -> None:
        n = 0
        while not stop.wait(0.5):
            batch = [
                Message(
                    platform_home + "payments",
                    f"c{n + i}",
                    payment(f"s{n + i}", "2026-01-01T10:00:00Z", 5.0),
                )
                for i in range(10)
            ]
            produce(bootstrap, batch)
            n += 10

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    supervisor.start("bronze_ingest", command, wait_s=240)
    try:
        yield stop
    finally:
        stop.set()
        sender.join(timeout=30)
        supervisor.stop("bronze_ingest", disable=False)


def test_anonymous_requests_are_refused(api_server: ApiServer) -> None:
    for route in ("/streaming/", "/streaming/api/status", "/streaming/metrics"):
        response = httpx.get(f"{api_server.url}{route}", timeout=30)
        assert response.status_code == 401, (route, response.text[:200])
    for route in ("/streaming/docs", "/streaming/openapi.json"):
        assert httpx.get(f"{api_server.url}{route}", timeout=30).status_code == 404, route
    # An anonymous browser visit lands on the login page, which brings it back afterwards.
    visit = httpx.get(f"{api_server.url}/streaming/", headers={"Accept": "text/html"}, timeout=30)
    assert visit.status_code == 307
    assert "/login" in visit.headers["location"]
    assert "streaming" in visit.headers["location"]
    forged = httpx.get(
        f"{api_server.url}/streaming/api/status",
        headers={"Authorization": "Bearer not-a-token"},
        timeout=30,
    )
    assert forged.status_code in (401, 403)


def test_an_anonymous_browser_visit_lands_on_the_login_page(api_server: ApiServer) -> None:
    """Issue 51: a browser that is not logged in and opens the page's address sees Airflow's
    login form, not the API's ``{"detail":"Not authenticated"}``."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium(), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(120_000)
            page.goto(f"{api_server.url}/streaming/")
            expect(page).to_have_url(re.compile(r"/login"), timeout=120_000)
            expect(page.get_by_role("button", name="Sign in")).to_be_visible(timeout=120_000)
            assert "Not authenticated" not in page.content()
        finally:
            browser.close()


def test_metrics_parse_as_prometheus_text_with_a_token(
    api_server: ApiServer, running_ingest: threading.Event
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    token = httpx.post(
        f"{api_server.url}/auth/token",
        json={"username": "admin", "password": api_server.password},
        timeout=30,
    ).json()["access_token"]
    headers = {"Authorization": f"Bearer {token}"}

    def job_up() -> dict | None:
        text = httpx.get(f"{api_server.url}/streaming/metrics", headers=headers, timeout=60).text
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        up = samples.get(("ingest_job_up", (("job", "bronze_ingest"),)))
        bronze = (("layer", "bronze"), ("table", "bronze_events"))
        rate = (("job", "bronze_ingest"), ("query", "bronze_ingest"))
        written = ("ingest_table_version", bronze) in samples
        ran = ("ingest_query_input_rows_per_second", rate) in samples
        return samples if up and written and ran else None

    samples = wait_until(job_up, 240, 3, what="bronze_ingest up and bronze_events written")
    names = {name for name, _ in samples}
    assert {
        "ingest_job_state",
        "ingest_query_input_rows_per_second",
        "ingest_kafka_lag_records",
        "ingest_kafka_lag_total_records",
        "ingest_table_version",
        "ingest_table_freshness_seconds",
        "ingest_gate_pending_versions",
    } <= names
    partitions = [
        labels
        for name, labels in samples
        if name == "ingest_kafka_lag_records" and ("job", "bronze_ingest") in labels
    ]
    assert len(partitions) == len(TOPICS) * 3  # every declared topic x 3 partitions


@contextlib.contextmanager
def streaming_page(api_server: ApiServer, time_zone: str | None = None) -> Iterator[Any]:
    """A Chromium page logged in to Airflow and on the Streaming view; yields the page.

    :param time_zone: set as the Airflow UI's time zone (its localStorage) before the view
        opens, as a user's choice in the UI's settings would.
    """
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium(),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1100})
            # A loaded CI machine renders Airflow's React app slowly: 30 s is not enough.
            page.set_default_timeout(120_000)
            expect.set_options(timeout=60_000)
            if time_zone:
                # Before any of the UI's scripts run, on every document: an evaluate after
                # "Sign in" races the login's navigation ("Execution context was destroyed").
                page.add_init_script(
                    f"localStorage.setItem('timezone', JSON.stringify({json.dumps(time_zone)}))"
                )
            page.goto(f"{api_server.url}/")
            page.get_by_label("Username").fill("admin")
            page.get_by_label("Password").fill(api_server.password)
            page.get_by_role("button", name="Sign in").click()
            page.get_by_role("link", name="Streaming").click()
            # Airflow keeps the iframe's location in its own URL (basePath + the iframe's
            # path): once the page's iframe has loaded /streaming/, the address bar reads
            # /plugin/streaming/streaming/. It may already be there when this line runs.
            expect(page).to_have_url(re.compile(r"/plugin/streaming/streaming/$"), timeout=120_000)
            yield page
        finally:
            browser.close()


def test_streaming_page_in_a_browser(
    api_server: ApiServer, running_ingest: threading.Event, platform_home: str
) -> None:
    from playwright.sync_api import expect

    with streaming_page(api_server) as page:
        frame = page.frame_locator("iframe")
        job = frame.locator('#jobs tr[data-job="bronze_ingest"]').first
        expect(job.locator(".state")).to_have_text("running", timeout=240_000)

        def input_rate() -> float | None:
            text = job.locator(".input-rate").inner_text().replace(",", "")
            return float(text) if text not in ("", NONE) and float(text) > 0 else None

        wait_until(input_rate, 120, 2, what="a non-zero input rate on the page")
        expect(frame.locator('#lag-jobs tr[data-job="bronze_ingest"] .total-lag')).to_be_visible()
        frame.locator("#lag-partitions summary").click()
        partitions = frame.locator('#lag tr[data-job="bronze_ingest"]')
        assert partitions.count() == len(TOPICS) * 3  # every declared topic x 3 partitions
        payments = [
            [c.replace(",", "") for c in row.locator("td").all_inner_texts()]
            for row in partitions.all()
            if platform_home + "payments" in row.inner_text()
        ]
        # The checkpoint's committed offsets and the broker's end offsets, as numbers.
        assert len(payments) == 3
        assert sum(int(row[4]) for row in payments) > 0
        assert all(int(row[5]) >= int(row[4]) for row in payments)
        fresh = frame.locator('#tables tr[data-table="bronze_events"] .freshness')
        expect(fresh).to_contain_text("ago")
        for job_name in ("payment_alerts", "payment_alerts_rt"):  # from the catalog
            expect(frame.locator(f'#jobs tr[data-job="{job_name}"]').first).to_be_visible()
        # The view fits the UI's window and scrolls inside it: the last section is reachable.
        box = page.locator("iframe").bounding_box()
        assert box is not None
        assert box["y"] + box["height"] <= 1100 + 1, box
        frame.locator("#alerts").scroll_into_view_if_needed()
        expect(frame.locator("#alerts")).to_be_in_viewport()
        # The README's screenshot: the whole view inside the UI (a window as tall as it).
        height = page.frames[-1].evaluate("document.documentElement.scrollHeight")
        page.set_viewport_size({"width": 1600, "height": int(min(height + 200, 4000))})
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert SCREENSHOT.stat().st_size > 10_000


#: How the page shows a time: the Airflow UI's format, in its time zone.
TIME = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")


def test_after_maintenance_and_a_restart_the_page_keeps_the_last_data_and_says_idle(
    api_server: ApiServer, running_ingest: threading.Event, platform_home: str
) -> None:
    """Issue 51: maintenance's commits are not data (freshness and rows added stay those of
    the last write), and a restarted job with nothing to read shows its last batch from
    before the restart and the activity ``idle``; times in the UI's time zone, one format."""
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    from deltalake import DeltaTable
    from playwright.sync_api import expect

    from ingest_core.catalog import get_catalog
    from ingest_core.delta_tables import last_data_commit
    from ingest_platform import supervisor
    from ingest_platform.streaming_status import kafka_lag
    from tests.integration.medallion import bronze_driver

    settings = get_settings()
    running_ingest.set()  # no more payments

    def caught_up() -> bool:
        lag = kafka_lag(settings, time.time())
        return any(j["job"] == "bronze_ingest" and j["total"] == 0 for j in lag["jobs"])

    wait_until(caught_up, 240, 3, what="bronze_ingest reading everything sent")
    supervisor.stop("bronze_ingest", disable=False)
    path = get_catalog().table("bronze_events").path(settings)
    written = last_data_commit(path)
    assert written is not None
    assert written.timestamp_ms is not None
    assert written.rows
    table = DeltaTable(str(path))
    table.optimize.compact()
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 30 days"})
    assert DeltaTable(str(path)).version() > written.version
    supervisor.start("bronze_ingest", bronze_driver(), wait_s=240)
    zone = "America/Sao_Paulo"
    shown = datetime.fromtimestamp(written.timestamp_ms / 1000, UTC).astimezone(ZoneInfo(zone))
    with streaming_page(api_server, time_zone=zone) as page:
        frame = page.frame_locator("iframe")
        expect(frame.locator("#timezone")).to_have_text(zone)
        job = frame.locator('#jobs tr[data-job="bronze_ingest"]').first
        expect(job.locator(".state")).to_have_text("running", timeout=240_000)
        expect(job.locator(".activity")).to_have_text("idle", timeout=240_000)
        expect(job.locator(".batch-time")).to_contain_text("before the restart")
        # Bronze keeps no event-time state: its watermark says so, not a bare dash.
        expect(job.locator(".watermark")).to_have_text("none (no event-time state)")
        row = frame.locator('#tables tr[data-table="bronze_events"]')
        expect(row.locator(".last-commit")).to_have_text(shown.strftime("%Y-%m-%d %H:%M:%S"))
        expect(row.locator(".rows-added")).to_have_text(f"{written.rows:,}")
        expect(row.locator(".maintenance")).to_contain_text("ago")
        times = [
            frame.locator("#generated").inner_text(),
            row.locator(".last-commit").inner_text(),
            job.locator(".batch-time").inner_text(),
        ]
        assert all(TIME.match(t) for t in times), times
