"""The documentation's shape: a short README, links that resolve, no tracker issue numbers on user-facing pages."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
# developer-facing review logs (docs/mutation.md, docs/mutation/*.md) are not user-facing pages
USER_FACING = [README, *(p for p in DOCS if p.name != "mutation.md"), *sorted((REPO / "reports").rglob("README.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def relative_links(text: str) -> list[str]:
    """Targets of the Markdown links in ``text`` that point into the repository (no URL, no bare anchor)."""
    return [target for target in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", target)
            and not target.startswith("#")]


def test_relative_links_are_found_and_urls_left_out():
    text = "[a](docs/x.md#sec) [b](https://example.org) [c](#here) [d](../README.md) [e](mailto:x@y.z)"
    assert relative_links(text) == ["docs/x.md#sec", "../README.md"]


def test_the_readme_is_a_front_page_of_at_most_200_lines():
    assert len(README.read_text().splitlines()) <= 200


def test_the_readme_states_the_two_commands_and_links_every_docs_page():
    text = README.read_text()
    assert "make run" in text and "make test" in text
    linked = {(README.parent / t.split("#")[0]).resolve() for t in relative_links(text)}
    missing = [p.name for p in DOCS if p.resolve() not in linked]
    assert not missing, f"README.md links no docs page named {missing}"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_to_a_file_that_exists(page):
    assert DOCS, "docs/ holds no pages"
    broken = [t for t in relative_links(page.read_text()) if not (page.parent / t.split("#")[0]).exists()]
    assert not broken, f"{page.relative_to(REPO)}: broken links {broken}"


@pytest.mark.parametrize("page", USER_FACING, ids=lambda p: str(p.relative_to(REPO)))
def test_user_facing_pages_cite_no_issue_numbers(page):
    hits = re.findall(r"(?i)\bissue[\s-]*#?\d+", page.read_text())
    assert not hits, f"{page.relative_to(REPO)}: {hits}; say what the thing is instead"
