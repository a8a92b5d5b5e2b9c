"""The README is a short front door: at most 200 lines, every link in it and in docs/ resolves (files and headings),
and CI runs exactly the test command it shows."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def _documents() -> list[Path]:
    return [README, *sorted((REPO / "docs").glob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def _anchors(path: Path) -> set[str]:
    anchors, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            anchors.add(_slug(match.group(1)))
    return anchors


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z]+:", t)]


def test_the_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= 200, f"README.md has {n} lines; move detail to docs/"


def test_every_link_resolves():
    broken = []
    for doc in _documents():
        for target in _links(doc):
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            if not path.exists():
                broken.append(f"{doc.name}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{doc.name}: {target} (no such heading in {path.name})")
    assert not broken, "\n".join(broken)


def test_docs_are_linked_from_the_readme():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in _links(README)}
    orphans = [p.name for p in _documents()[1:] if p.resolve() not in linked]
    assert not orphans, f"docs not reachable from README.md: {orphans}"


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    command = next(line for line in ci.splitlines() if "pytest" in line and not line.startswith("#"))
    shown = [line for line in README.read_text(encoding="utf-8").splitlines() if "python -m pytest" in line]
    assert shown, "README.md shows no test command"
    assert command.replace(" -q", "") == shown[0].strip(), (command, shown[0])


def test_the_link_check_can_fail(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("# Title\n\n[a](x.md#title) [b](missing.md) [c](x.md#nowhere) [d](https://example.org)\n")
    assert _links(doc) == ["x.md#title", "missing.md", "x.md#nowhere"]
    assert _anchors(doc) == {"title"}
