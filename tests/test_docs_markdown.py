"""Lists in the documentation render as lists. The site's Markdown (Python-
Markdown, as mkdocs runs it) starts a list only after a blank line, a
heading or another item of the list: an item written straight after a
paragraph, a table or a code fence is shown as literal text, and
``mkdocs build --strict`` does not see it."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.) +\S")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def literal_list_items(text: str):
    """(line number, line) of each list item inside a block of lines that
    did not start as a list (a paragraph, a table, a code fence) with no
    blank line between; code inside fences is skipped."""
    found, fence, first = [], None, None  # first: the first line of the block the line is in
    for number, line in enumerate(text.splitlines(), 1):
        marker = FENCE.match(line)
        if fence:
            if marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence):
                fence = None
            continue
        if marker:
            fence, first = marker.group(1), first or line
        elif not line.strip() or line.lstrip().startswith("#"):
            first = None  # a blank line ends a block; a heading is a block of its own
        elif first is None:
            first = line
        elif ITEM.match(line) and not ITEM.match(first):
            found.append((number, line.strip()))
    return found


def test_the_rule_finds_an_item_after_a_paragraph_a_table_and_a_fence():
    text = "Text:\n- a\n\n| x |\n|---|\n1. b\n\n```\ncode\n- c\n```\n- d\n\n- e\n  more\n- f\n\n## H\n- g\n\n- h\n\n  para\n- i\n"
    assert [n for n, _ in literal_list_items(text)] == [2, 6, 12, 24]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_list_starts_after_a_blank_line(page):
    found = literal_list_items(page.read_text(encoding="utf8"))
    assert not found, (
        f"{page.name}: a list item straight after a paragraph, table or fence renders as text: "
        + "; ".join(f"line {n}: {line[:60]}" for n, line in found)
    )


@pytest.mark.skipif(importlib.util.find_spec("markdown") is None, reason="Markdown is not installed (the docs extra)")
@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_no_list_marker_is_left_in_a_rendered_paragraph(page):
    # what the site shows: the same Markdown extensions as mkdocs.yml's
    import markdown
    import yaml

    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf8"), Loader=yaml.BaseLoader)
    extensions = [e if isinstance(e, str) else next(iter(e)) for e in config["markdown_extensions"]]
    html = markdown.markdown(page.read_text(encoding="utf8"), extensions=extensions)
    literal = [
        line.strip()[:60]
        for paragraph in re.findall(r"<p>(.*?)</p>", html, re.S)
        for line in paragraph.split("\n")[1:]
        if ITEM.match(line)
    ]
    assert not literal, f"{page.name}: list items shown as text: {literal}"
