"""The README and the pages in docs/ link only to what exists.

The reference moved from the README into docs/, one page per topic (issue 44, section 5):
every relative link in README.md and docs/*.md must name a file of the checkout, and every
``#anchor`` a heading of the page it points into, as GitHub makes anchors from headings,
or an explicit ``<a id>`` there.
Links to other sites are left alone: the suite never leaves loopback. The README also keeps
its promises about itself: under 500 lines, the run and test lines exactly as users (and
`.ci/run`) know them, each docs page linked from it, and its "What you get" pictures (taken
by tests/test_browser_readme_screenshots.py) committed, light and dark, and small.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
RUN_LINE = "pip install . && python -m jupyterlab_nvdashboard.server 8000"
TEST_LINE = "bash .ci/install && python -m pytest"
# [text](target) and ![alt](target); a target ends at whitespace or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
PICTURE_WIDTH_PX = 640  # the README's pictures: half of 1280, still readable when clicked
PICTURE_MAX_BYTES = 200_000


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks (a link inside code is not a link)."""
    lines, in_code = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            in_code = not in_code
        elif not in_code:
            lines.append(line)
    return lines


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for line in _prose(page.read_text(encoding="utf-8")):
        match = re.match(r"^#{1,6} (.+)$", line)
        if match:
            anchor = github_anchor(match.group(1))
            count = 1
            unique = anchor
            while unique in found:  # GitHub numbers repeated headings -1, -2, ...
                unique, count = f"{anchor}-{count}", count + 1
            found.add(unique)
        # An explicit anchor (``<a id="..."></a>``) for a place that is no heading: GitHub
        # keeps it (as ``user-content-...``, which it also answers to under the plain id).
        found.update(re.findall(r'<a id="([^"]+)"></a>', line))
    return found


def links(page: Path) -> list[str]:
    return [target for line in _prose(page.read_text(encoding="utf-8"))
            for target in LINK.findall(line)]


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        if not destination.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target} (no heading with that anchor)")
    return broken


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_every_link_of_the_readme_and_the_docs_resolves() -> None:
    broken = {page.relative_to(ROOT).as_posix(): found
              for page in pages() if (found := broken_links(page))}
    assert not broken, broken


def test_the_readme_links_every_docs_page() -> None:
    linked = {(README.parent / target.partition("#")[0]).resolve()
              for target in links(README)}
    unlinked = [page.name for page in DOCS.glob("*.md") if page.resolve() not in linked]
    assert not unlinked, unlinked


def test_the_readme_is_short_and_keeps_its_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 500
    code_lines = {line.strip() for line in text.splitlines()}
    assert RUN_LINE in code_lines
    assert TEST_LINE in code_lines  # .ci/run runs exactly this line


def test_a_broken_link_and_a_wrong_anchor_are_found(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A title: with `code`\n\n## Second one\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md#a-title-with-code) [ok](there.md#second-one)\n"
                    "[gone](missing.md) [bad](there.md#nope) [web](https://example.org/x)\n"
                    "```\n[in code](nowhere.md)\n```\n")
    assert broken_links(page) == ["missing.md (no such file)",
                                  "there.md#nope (no heading with that anchor)"]


def test_the_readme_shows_small_light_and_dark_pictures_that_are_committed() -> None:
    from PIL import Image

    pictures = sorted({target for target in links(README)
                       if target.startswith("docs/images/") and target.endswith(".png")})
    names = {Path(picture).stem for picture in pictures}
    assert {"overview-light", "overview-dark", "lab-light", "lab-dark"} <= names, pictures
    for picture in pictures:
        path = ROOT / picture
        assert path.stat().st_size < PICTURE_MAX_BYTES, (picture, path.stat().st_size)
        with Image.open(path) as opened:
            assert opened.format == "PNG" and opened.width == PICTURE_WIDTH_PX, (
                picture, opened.size)
