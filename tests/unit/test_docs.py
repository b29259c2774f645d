"""The documentation's shape: a short README, relative links that lead somewhere, and every
page of docs/ in mkdocs.yml's nav (`make docs` builds the site; this test needs no mkdocs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def _prose(text: str) -> str:
    """The text without code blocks and code spans, where brackets are not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _anchors(page: Path) -> set[str]:
    """Heading ids as MkDocs (toc) and GitHub make them, for headings without markup
    other than code spans."""
    anchors = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
        anchors.add(re.sub(r"[\s]+", "-", text))
    return anchors


def _relative_links(page: Path) -> list[str]:
    targets = LINK.findall(_prose(page.read_text()))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_readme_starts_small():
    lines = README.read_text().splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines: move detail to docs/"


@pytest.mark.parametrize("page", [README, *_pages()], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_existing_files(page: Path):
    broken = []
    for target in _relative_links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading '#{anchor}'")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_docs_link_within_the_site_only():
    """MkDocs cannot serve a link out of docs/ (and --strict fails on it): name such files
    as `code` instead."""
    outside = [
        f"{page.name}: {target}"
        for page in _pages()
        for target in _relative_links(page)
        if target.split("#")[0]
        and DOCS.resolve() not in (page.parent / target.split("#")[0]).resolve().parents
    ]
    assert not outside, outside


def _nav_pages(nav: object) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, list):
        return set().union(*(_nav_pages(item) for item in nav))
    if isinstance(nav, dict):
        return set().union(*(_nav_pages(item) for item in nav.values()))
    return set()


def test_every_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["docs_dir"] == "docs"
    nav = _nav_pages(config["nav"])
    pages = {p.name for p in _pages()}
    assert pages - nav == set(), f"pages missing from mkdocs.yml's nav: {sorted(pages - nav)}"
    assert nav - pages == set(), f"nav entries without a page: {sorted(nav - pages)}"


def test_the_test_count_in_the_docs_is_what_pytest_collects():
    """Issue 51: docs/tests.md's figure ("**N tests**") is the collected count, so it never
    drifts from the suite it describes."""
    import subprocess
    import sys

    text = (ROOT / "docs" / "tests.md").read_text()
    stated = [int(n) for n in re.findall(r"\*\*(\d+) tests\*\*", text)]
    assert len(stated) == 1, f"docs/tests.md should state the count once as **N tests**: {stated}"
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = re.search(r"^(\d+) tests? collected", collected.stdout, re.MULTILINE)
    assert found, collected.stdout[-2000:] + collected.stderr[-2000:]
    assert stated[0] == int(found.group(1)), (
        f"docs/tests.md says {stated[0]} tests, pytest collects {found.group(1)}: update it"
    )
