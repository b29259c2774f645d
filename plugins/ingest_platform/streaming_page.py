"""The platform's Airflow plugin: a **Streaming** page in the Airflow UI and ``/metrics``.

:class:`IngestPlatformPlugin` (registered through the ``airflow.plugins`` entry point in
pyproject.toml) adds, on Airflow 3's plugin interface:

* a FastAPI app mounted at ``/streaming`` on the API server: ``/streaming/`` (the page),
  ``/streaming/api/status`` (the page's data as JSON:
  :func:`ingest_platform.streaming_status.snapshot`) and ``/streaming/metrics`` (the same in
  the Prometheus text format). Every route requires Airflow's login like the rest of the API
  (the UI's session cookie or ``Authorization: Bearer <token>`` from ``POST /auth/token``)
  and the ``PLUGINS`` view permission; an anonymous request gets 401, except a browser's
  visit (it accepts HTML), which is sent to the login page and back;
* an external view ``Streaming`` in the UI's navigation that shows ``/streaming/`` inside
  the UI (``/plugin/streaming``).

Imports no pyspark (the API server loads it). Snapshots are shared between requests: one
younger than :data:`SNAPSHOT_TTL_S` seconds is served as is; an older one is served while a
single request computes the next (requests never queue behind each other's snapshots,
whatever the broker's state), and only the very first request waits for one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
from airflow.api_fastapi.core_api.security import requires_access_view
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, Request, Response
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.exceptions import HTTPException

#: Where the app is mounted on Airflow's API server.
URL_PREFIX = "/streaming"
#: Seconds a snapshot is reused (the page refreshes every 5 s).
SNAPSHOT_TTL_S = 2.0
PAGE = Path(__file__).with_name("static") / "streaming.html"

_cache: dict[str, Any] = {"computing": False}
_cache_changed = threading.Condition()


def current_snapshot() -> dict[str, Any]:
    """:func:`ingest_platform.streaming_status.snapshot`, shared between requests (module
    docstring).

    :raises Exception: whatever :func:`~ingest_platform.streaming_status.snapshot` raised
        for the request that computed it (the next request tries again).
    """
    from ingest_platform.streaming_status import snapshot

    while True:
        with _cache_changed:
            if "value" in _cache and (
                _cache["computing"] or time.monotonic() - _cache["at"] <= SNAPSHOT_TTL_S
            ):
                return dict(_cache["value"])
            if _cache["computing"]:  # the first snapshot is under way: wait for it
                _cache_changed.wait_for(lambda: not _cache["computing"])
                continue
            _cache["computing"] = True
        try:
            value = snapshot()
        except BaseException:
            with _cache_changed:
                _cache["computing"] = False
                _cache_changed.notify_all()
            raise
        with _cache_changed:
            _cache.update(value=value, at=time.monotonic(), computing=False)
            _cache_changed.notify_all()
        return dict(value)


class _SnapshotCollector:
    """A ``prometheus_client`` collector over :func:`current_snapshot`."""

    def collect(self) -> Iterator[Any]:
        from ingest_platform.streaming_status import metric_families

        yield from metric_families(current_snapshot())


def create_app() -> FastAPI:
    """The plugin's FastAPI app (module docstring); every route requires the login."""
    app = FastAPI(
        title="Streaming",
        description="Always-on jobs, Kafka lag, tables and gates of the ingest platform.",
        # FastAPI's own docs routes would bypass the dependencies below: none.
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        dependencies=[Depends(requires_access_view(AccessView.PLUGINS))],
    )

    @app.exception_handler(HTTPException)
    async def login_first(request: Request, error: HTTPException) -> Response:
        """A browser's anonymous visit goes to the UI's login page, which brings it back; an
        API client (no HTML in ``Accept``) keeps the 401."""
        if error.status_code == 401 and "text/html" in request.headers.get("accept", ""):
            from airflow.api_fastapi.app import get_auth_manager

            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)))
        return await http_exception_handler(request, error)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(PAGE.read_text())

    @app.get("/api/status")
    def status() -> dict[str, Any]:
        """The page's data (:func:`ingest_platform.streaming_status.snapshot`)."""
        return current_snapshot()

    @app.get("/metrics")
    def metrics() -> Response:
        """Prometheus text format (:func:`ingest_platform.streaming_status.metric_families`)."""
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_SnapshotCollector())
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


class IngestPlatformPlugin(AirflowPlugin):
    """The Streaming page and metrics (module docstring)."""

    name = "ingest_platform"
    fastapi_apps = [  # noqa: RUF012 - Airflow's plugin interface
        {"app": create_app(), "url_prefix": URL_PREFIX, "name": "Streaming"}
    ]
    external_views = [  # noqa: RUF012
        {
            "name": "Streaming",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "url_route": "streaming",
        }
    ]
