"""The manual as a whole: its generated pages are current, it builds with ``mkdocs build
--strict`` (no broken link, anchor or page left out of the nav), every relative link of the
README and the manual resolves, and the user docs say what is, not which issue brought it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from docs import gen_reference
from pigeond.model import State
from tests.docs_pages import (
    DOCS,
    MKDOCS_YML,
    REPO,
    anchors,
    display,
    headings,
    page,
    section,
    user_docs,
)

# [text](target) and [text]: target, outside code; a target that names a scheme is not ours
LINK_RE = re.compile(r"\]\(([^)\s]+)\)|^\[[^\]]+\]:\s*(\S+)", re.M)
SCHEME_RE = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def without_code(text: str) -> str:
    """The text with fenced blocks and code spans blanked (their brackets are not links)."""
    text = re.sub(r"^( *)```.*?^\1```", "", text, flags=re.M | re.S)
    return re.sub(r"(`+).*?\1", "", text, flags=re.S)


def relative_links(path: Path) -> list[str]:
    found = LINK_RE.findall(without_code(path.read_text(encoding="utf-8")))
    return [a or b for a, b in found if not SCHEME_RE.match(a or b)]


@pytest.mark.parametrize("relative", sorted(gen_reference.PAGES))
def test_the_generated_page_is_what_the_generator_makes_now(relative: str) -> None:
    """docs/reference/ holds exactly what docs/gen_reference.py makes from today's sources."""
    committed = DOCS / relative
    made = gen_reference.PAGES[relative]()
    assert committed.exists(), f"docs/{relative} is missing: run `make docs`"
    assert committed.read_text(encoding="utf-8") == made, (
        f"docs/{relative} is stale (its source changed): run `make docs` and commit it"
    )


def test_every_generated_page_is_in_the_nav() -> None:
    """The reference pages the generator writes are the nav's reference pages."""
    in_nav = {display(p).removeprefix("docs/") for p in user_docs()}
    assert {p for p in in_nav if p.startswith("reference/")} == set(gen_reference.PAGES)


@pytest.mark.slow
def test_mkdocs_builds_the_manual_in_strict_mode(tmp_path: Path) -> None:
    """``mkdocs build --strict`` succeeds: every internal link and anchor resolves and
    every page is in the nav (mkdocs.yml's ``validation:`` makes each a warning, and
    ``--strict`` a failure)."""
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "--config-file", str(MKDOCS_YML), "--site-dir", str(site)],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert (site / "index.html").is_file()
    assert (site / "reference" / "http-api.html").is_file()


def test_mkdocs_validation_turns_broken_links_into_warnings() -> None:
    """The settings that make ``--strict`` fail on a broken link, anchor or omitted page."""
    config = MKDOCS_YML.read_text(encoding="utf-8")
    for setting in ("omitted_files: warn", "not_found: warn", "anchors: warn"):
        assert re.search(rf"^\s+{setting}$", config, flags=re.M), setting


@pytest.mark.parametrize("path", user_docs(), ids=display)
def test_every_relative_link_points_at_a_file_and_anchor_that_exist(path: Path) -> None:
    """Each relative link (``docs/agents.md#swarm_send``, ``#names``) names a file that
    exists, and, for a Markdown page, an anchor that page has."""
    broken = []
    for link in relative_links(path):
        target, _, anchor = unquote(link).partition("#")
        file = (path.parent / target).resolve() if target else path
        if not file.exists():
            broken.append(f"{link}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{link}: {display(file)} has no anchor #{anchor}")
    assert broken == []


def test_the_readme_links_into_every_page_of_the_guide() -> None:
    """The front door leads to each page of the manual's guide (the reference pages are
    linked from those)."""
    readme = user_docs()[0]
    linked = {(readme.parent / link.partition("#")[0]).resolve() for link in relative_links(readme)}
    guide = [p for p in user_docs()[1:] if "reference" not in p.parts and p.name != "index.md"]
    assert [display(p) for p in guide if p.resolve() not in linked] == []


def test_the_readme_stays_a_front_door() -> None:
    """The README is at most about 300 lines, and says how to start and where to go next."""
    readme = user_docs()[0]
    lines = readme.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300
    titles = [title for _, _, title in headings("\n".join(lines))]
    assert {"Why", "Quick start", "Installing the plugin", "Where to go next"} <= set(titles)


@pytest.mark.parametrize("path", user_docs(), ids=display)
def test_the_docs_name_no_issue_numbers(path: Path) -> None:
    """User docs say what is, not which issue (or ticket) brought it."""
    text = path.read_text(encoding="utf-8")
    assert re.findall(r".{0,30}\b(?:issues?|tickets?) #?\d+.{0,30}", text, flags=re.I) == []


def test_the_concepts_page_explains_every_message_state() -> None:
    """The state table of docs/concepts.md has one row per state a message can be in."""
    table = section(page("concepts.md"), "Messages")
    listed = re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M)
    assert listed == [s.value for s in State]
