"""The documentation's shape: a README within its size budget, links (and their anchors) that resolve, no
machine paths in docs/, no tracker issue numbers on user-facing pages."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
REPORTS = sorted((REPO / "reports").rglob("*.md"))
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


def headings(page: Path) -> set[str]:
    """The anchors GitHub gives ``page``'s headings (outside code blocks): lower case, punctuation but
    ``-`` and ``_`` dropped, spaces as ``-``, a repeated heading numbered ``-1``, ``-2``, ..."""
    found, seen, fence = set(), {}, False
    for line in page.read_text().splitlines():
        fence ^= line.startswith("```")
        heading = None if fence else re.match(r"#{1,6} (.*)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return found


def test_headings_are_slugged_as_github_does(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Cost and resources\n## What a plan costs, and the 7-day limit: `allow_long`\n"
                    "## FeMAM's additive model\n```sh\n# not a heading\n```\n## Notes\n## Notes\n")
    assert headings(page) == {"cost-and-resources", "what-a-plan-costs-and-the-7-day-limit-allow_long",
                              "femams-additive-model", "notes", "notes-1"}


def test_the_readme_is_a_front_page_within_its_size_budget():
    """At most 120 lines and 8 KiB: what fedbench is, the two commands, the default suite's table, the
    papers, and an index of the docs; everything else lives in docs/ and reports/."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 120
    assert len(text.encode("utf-8")) <= 8192


def test_the_readme_states_the_two_commands_and_links_every_docs_page():
    text = README.read_text()
    commands = re.search(r"^## The two commands\n+```sh\n(.*?)^```", text, flags=re.M | re.S)
    assert commands, "README.md has no section 'The two commands' opening on a sh block"
    assert [line.split()[:2] for line in commands.group(1).splitlines()] == [["make", "run"], ["make", "test"]]
    linked = {(README.parent / t.split("#")[0]).resolve() for t in relative_links(text)}
    missing = [p.name for p in DOCS if p.resolve() not in linked]
    assert not missing, f"README.md links no docs page named {missing}"


@pytest.mark.parametrize("page", [README, *DOCS, *REPORTS], ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_to_a_file_that_exists(page):
    assert DOCS and REPORTS, "docs/ or reports/ holds no pages"
    broken = [t for t in relative_links(page.read_text()) if not (page.parent / t.split("#")[0]).exists()]
    assert not broken, f"{page.relative_to(REPO)}: broken links {broken}"


@pytest.mark.parametrize("page", [README, *DOCS, *REPORTS], ids=lambda p: str(p.relative_to(REPO)))
def test_every_anchor_names_a_heading_of_its_page(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    targets = [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t) and "#" in t]
    broken = []
    for target in targets:
        path, _, anchor = target.partition("#")
        linked = (page.parent / path) if path else page
        if linked.suffix == ".md" and linked.is_file() and anchor not in headings(linked):
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: links to headings that do not exist {broken}"


@pytest.mark.parametrize("page", [README, *sorted((REPO / "docs").rglob("*.md"))], ids=lambda p: str(p.relative_to(REPO)))
def test_guides_name_no_machine_paths(page):
    """docs/ and the README are guides: results live under results/<name>, not on one machine's disks
    (measured records under reports/ may say where their runs wrote)."""
    hits = re.findall(r"(?<![\w.])/(?:work|tmp|home|root|persist|mnt)/[^\s`)]*", page.read_text())
    assert not hits, f"{page.relative_to(REPO)}: {hits}"


@pytest.mark.parametrize("page", USER_FACING, ids=lambda p: str(p.relative_to(REPO)))
def test_user_facing_pages_cite_no_issue_numbers(page):
    hits = re.findall(r"(?i)\bissue[\s-]*#?\d+", page.read_text())
    assert not hits, f"{page.relative_to(REPO)}: {hits}; say what the thing is instead"
