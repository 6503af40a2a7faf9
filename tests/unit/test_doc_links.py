"""Every relative link in README.md and docs/*.md reaches a file, and its #anchor a heading
of that file (issue 30: the README's reference moved to docs/, and a link left pointing
at the old place would send a newcomer to the top of the wrong page).

Anchors follow GitHub's rule: the heading's text lowercased, punctuation dropped (word
characters, hyphens and spaces stay), spaces made hyphens, and a repeated heading
suffixed -1, -2, ...
"""

from __future__ import annotations

import re
from pathlib import Path

import nimbus_thrift

ROOT = Path(nimbus_thrift.__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text without fenced code blocks, where `#` lines and brackets are code."""
    return _FENCE.sub("", text)


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link's text only
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(_prose(path.read_text())):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    # A code span is code, not a link; as one word it keeps a link whose text is code.
    return _LINK.findall(_CODE_SPAN.sub("x", _prose(path.read_text())))


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def broken(path: Path) -> list[str]:
    problems = []
    for target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):   # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{target}: no file {_shown(dest)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{target}: no heading #{anchor} in {_shown(dest)}")
    return problems


def test_the_slug_follows_githubs_rule() -> None:
    assert slug("Watching it: the web page, Storm's REST API, Prometheus") == \
        "watching-it-the-web-page-storms-rest-api-prometheus"
    assert slug("`max_frame_size` and the [Limits](x.md)") == "max_frame_size-and-the-limits"


def test_a_missing_file_or_heading_is_reported(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Title\n\n## Limits\n\n```\n## Not a heading\n```\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#limits) [self](#here) [gone](c.md) [no](b.md#not-a-heading)"
                    "\n\n## Here\n`[code](x.md)` [web](https://example.org/#x)\n")
    problems = [p.split(":")[0] for p in broken(page)]
    assert problems == ["c.md", "b.md#not-a-heading"]


def test_every_relative_link_and_anchor_in_the_docs_resolves() -> None:
    assert len(DOCS) > 8
    problems = [f"{_shown(path)}: {p}" for path in DOCS for p in broken(path)]
    assert problems == []
