"""The user docs as the tests read them: the README, then the manual's pages in the order
of ``mkdocs.yml``'s nav (the reading order), and the anchors each page has."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import markdown

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
MKDOCS_YML = REPO / "mkdocs.yml"
# the Markdown extensions mkdocs.yml turns on, so anchors come out as on the site
EXTENSIONS = ["toc", "attr_list", "tables", "fenced_code"]


def nav_pages() -> list[Path]:
    """The manual's pages, in nav order (every ``Title: page.md`` line of mkdocs.yml)."""
    text = MKDOCS_YML.read_text(encoding="utf-8")
    nav = text.split("\nnav:\n", 1)[1]
    return [DOCS / page for page in re.findall(r":\s+(\S+\.md)\s*$", nav, flags=re.M)]


def user_docs() -> list[Path]:
    """The README, then every page of the manual, in reading order."""
    return [README, *nav_pages()]


def page(name: str) -> Path:
    """A page of the manual by its path under docs/ (``"agents.md"``)."""
    path = DOCS / name
    assert path in nav_pages(), f"{name} is not in mkdocs.yml's nav"
    return path


def display(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    """The ids a page's rendered HTML has: its headings' anchors and explicit ``{#id}``s."""
    html = markdown.markdown(path.read_text(encoding="utf-8"), extensions=EXTENSIONS)
    return frozenset(re.findall(r'\bid="([^"]+)"', html))


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line index, level, title) of each heading outside fenced code blocks."""
    found = []
    fenced = False
    for i, line in enumerate(text.splitlines()):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"(#+) (.*)", line)):
            found.append((i, len(match.group(1)), match.group(2)))
    return found


def section(path: Path, title: str) -> str:
    """A page's text from the heading ``title`` (any level) to the next heading of the
    same or a higher level."""
    lines = path.read_text(encoding="utf-8").splitlines()
    marks = headings("\n".join(lines))
    starts = [(i, level) for i, level, text in marks if text == title]
    assert len(starts) == 1, f"{display(path)} has no single heading {title!r}"
    [(start, level)] = starts
    ends = [i for i, lv, _ in marks if i > start and lv <= level]
    return "\n".join(lines[start : ends[0] if ends else len(lines)]) + "\n"
