"""Every relative link in README.md, docs/, test/README.md and bench_results/**/HISTORY.md points at a file that exists,
and every #anchor at a heading of that file (GitHub's heading slugs)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.MULTILINE)}


def broken_links(pages: list[Path]) -> list[str]:
    problems = []
    for page in pages:
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            where = f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}: {target}"
            if not dest.exists():
                problems.append(f"{where}: no such file")
            elif anchor and dest.is_file() and anchor not in anchors(dest):
                problems.append(f"{where}: no heading with that anchor")
    return problems


def pages() -> list[Path]:
    docs = sorted((ROOT / "docs").glob("*.md"))
    return [ROOT / "README.md", *docs, ROOT / "test" / "README.md", *sorted(ROOT.glob("bench_results/**/HISTORY.md"))]


def test_every_docs_link_resolves():
    found = pages()
    assert len(found) > 10
    assert broken_links(found) == []


def test_the_link_check_can_fail(tmp_path):
    (tmp_path / "b.md").write_text("# A heading: `code`\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#a-heading-code) [gone](c.md) [bad](b.md#nope) [web](https://x.org)\n"
                    "```\n[in a fence](d.md)\n```\n")
    assert broken_links([page]) == [f"{page}: c.md: no such file", f"{page}: b.md#nope: no heading with that anchor"]
