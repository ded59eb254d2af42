"""bench/RESULTS.md, the index of runs, and the run notes beside the raw output
(bench/results/<run>/NOTES.md): every note is indexed, every raw output has a note, every
link resolves.

- Every bench/results/*/NOTES.md is linked from bench/RESULTS.md, starts with a title and
  links back to bench/README.md (the current state).
- Every entry of bench/results/ (a run directory or a raw file) has a NOTES.md of its own or
  is linked from one.
- Every relative link in bench/RESULTS.md, bench/README.md and every NOTES.md names an
  existing file or directory, and an anchor (`file.md#heading`) names a heading of that file
  (GitHub's anchors: lower case, punctuation dropped, spaces to hyphens).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
RESULTS_DIR = BENCH / "results"
INDEX = BENCH / "RESULTS.md"
PAGE = BENCH / "README.md"

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.*)$")


def notes() -> List[Path]:
    return sorted(RESULTS_DIR.glob("*/NOTES.md"))


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> Set[str]:
    seen: Dict[str, int] = {}
    found: Set[str] = set()
    fence = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        match = None if fence else HEADING.match(line)
        if match:
            base = slug(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> Iterator[Tuple[str, Path, str]]:
    """(link as written, the path it names, its anchor) for every relative link of a file."""
    fence = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            file_part, _, anchor = target.partition("#")
            yield target, (path.parent / file_part).resolve() if file_part else path.resolve(), anchor


def test_every_note_is_indexed_and_says_what_it_is() -> None:
    assert notes(), "no bench/results/*/NOTES.md"
    indexed = {p for _, p, _ in links(INDEX)}
    unindexed = [str(n.relative_to(REPO)) for n in notes() if n.resolve() not in indexed]
    assert not unindexed, f"bench/RESULTS.md does not link these notes: {unindexed}"
    for note in notes():
        lines = note.read_text().splitlines()
        assert lines and lines[0].startswith("# "), f"{note.relative_to(REPO)}: no title on its first line"
        head = list(links_of_lines(note, lines[:12]))
        assert PAGE.resolve() in head, f"{note.relative_to(REPO)}: no link back to bench/README.md in its header"


def links_of_lines(path: Path, lines: List[str]) -> Iterator[Path]:
    for line in lines:
        for target in LINK.findall(line):
            yield (path.parent / target.partition("#")[0]).resolve()


def test_every_raw_output_has_a_note() -> None:
    linked: Set[Path] = set()
    for note in notes():
        linked.update(p for _, p, _ in links(note))
    orphans = []
    for entry in sorted(RESULTS_DIR.iterdir()):
        if (entry / "NOTES.md").is_file():
            continue
        covered = any(p == entry.resolve() or entry.resolve() in p.parents for p in linked)
        if not covered:
            orphans.append(entry.name)
    assert not orphans, f"bench/results entries with no NOTES.md and linked from none: {orphans}"


def test_every_link_resolves() -> None:
    broken = []
    for page in [INDEX, PAGE, *notes()]:
        for target, path, anchor in links(page):
            where = f"{page.relative_to(REPO)} -> {target}"
            if not path.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and (path.suffix != ".md" or anchor not in anchors(path)):
                broken.append(f"{where} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_slug() -> None:
    assert slug("Runs 23 and 24 (2026-11-25, thirteenth session): the final code, and before / after") == (
        "runs-23-and-24-2026-11-25-thirteenth-session-the-final-code-and-before--after")
    assert slug("A 1,000-key Lookup (issue 16; bench/rpc/python_lookup.py)") == (
        "a-1000-key-lookup-issue-16-benchrpcpython_lookuppy")
    assert slug("Node: two H200s, `vllm serve` replicas") == "node-two-h200s-vllm-serve-replicas"
