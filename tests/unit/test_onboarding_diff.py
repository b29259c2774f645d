"""Onboarding is configuration (issue 53): the commit that added Olist's reviews as a source
(contract, Silver table, Gold aggregate, replay mapping) changed only ``include/`` and
``docs/``: no Python, no test pinned to the old catalog."""

from __future__ import annotations

import subprocess

import pytest

from ingest_core.settings import PROJECT_ROOT

pytestmark = pytest.mark.unit

REVIEWS_CONTRACT = "include/contracts/reviews.yaml"


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    ).stdout


def test_the_reviews_source_was_added_by_configuration_only() -> None:
    if not (PROJECT_ROOT / ".git").exists():
        pytest.skip("not a git checkout: the history is not here to read")
    if _git("rev-parse", "--is-shallow-repository").strip() == "true":
        pytest.skip("a shallow clone may not hold the commit that added the source")
    added = _git("log", "--diff-filter=A", "--format=%H", "--", REVIEWS_CONTRACT).split()
    assert added, f"no commit adds {REVIEWS_CONTRACT}"
    changed = _git("show", "--name-only", "--format=", added[-1]).split()
    assert REVIEWS_CONTRACT in changed
    assert [f for f in changed if not f.startswith(("include/", "docs/"))] == []
