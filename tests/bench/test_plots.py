"""bench/README.md, the results page: its plots regenerate from the committed raw output, and
every measured figure README.md quotes is on it.

Which README.md figures count: every number (or range / list of numbers such as "97–98 %",
"0.82 / 0.72 / 0.84 ×", "1.09-1.12x") followed by one of the units ×, x, %, ms, µs, GB/s or
req/s, anywhere in README.md. They are compared after dropping spaces and thousands commas
and reading "–" as "-" and "×" as "x"; a README figure must equal a figure extracted the same
way from bench/README.md (not merely be a substring of one). Plain counts and seconds
("0.43 s", "1,000 of 1,000") are not checked.

Needs matplotlib (scripts/setup_python.sh installs it); ~5 s.
"""
from __future__ import annotations

import hashlib
import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import List, Set

import pytest

REPO = Path(__file__).resolve().parents[2]
PLOTS_DIR = REPO / "bench" / "plots"
RESULTS_PAGE = REPO / "bench" / "README.md"

FIGURE = re.compile(r"(?<![\w.])(\d[\d.,]*(?:\s*[–\-/]\s*\d[\d.,]*)*)\s?(×|x(?!\w)|%|ms|µs|GB/s|req/s)")


def normalise(figure: str) -> str:
    return re.sub(r"[\s,]", "", figure).replace("–", "-").replace("×", "x")


def figures(text: str) -> List[str]:
    return [normalise(m.group(0)) for m in FIGURE.finditer(text)]


def load_make_plots() -> ModuleType:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pytest.fail("matplotlib is missing from this environment: bash scripts/setup_python.sh")
    spec = importlib.util.spec_from_file_location("make_plots", PLOTS_DIR / "make_plots.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_figure_pattern() -> None:
    assert figures("0.82 / 0.72 / 0.84 × native, 1.09-1.12x, 97–98 %, 141–200 µs, 16.3 req/s") == [
        "0.82/0.72/0.84x", "1.09-1.12x", "97-98%", "141-200µs", "16.3req/s"]
    assert figures("Llama-3.1-8B, 2x H200, 1,000 of 1,000, 0.43 s, 25× faster, 1.1–1.75 GB/s") == [
        "2x", "25x", "1.1-1.75GB/s"]


def test_every_plot_regenerates_from_the_committed_data(tmp_path: Path) -> None:
    make_plots = load_make_plots()
    expected: Set[str] = set(make_plots.PLOTS)
    assert len(expected) >= 5
    committed = {p.name for p in PLOTS_DIR.glob("*.png")}
    assert committed == expected, "bench/plots/*.png differs from make_plots.PLOTS: run bench/plots/make_plots.py"
    assert make_plots.main(["--out", str(tmp_path)]) == 0
    made = {p.name for p in tmp_path.iterdir()}
    assert made == expected
    for name in expected:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    # Deterministic: the same plot made again has the same bytes (no timestamp in its metadata).
    again = tmp_path / "again"
    again.mkdir()
    name = "tp_lookup.png"
    make_plots.PLOTS[name](again)
    digest = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / name, again / name)]
    assert digest[0] == digest[1]


def test_every_readme_figure_is_on_the_results_page() -> None:
    readme = figures((REPO / "README.md").read_text())
    page = set(figures(RESULTS_PAGE.read_text()))
    missing = sorted({f for f in readme if f not in page})
    assert not missing, f"README.md quotes figures bench/README.md does not: {missing}"


def test_results_page_tables_and_links() -> None:
    text = RESULTS_PAGE.read_text()
    long_cells = []
    for line in text.splitlines():
        if line.startswith("|"):
            for cell in line.strip().strip("|").split("|"):
                if len(cell.split()) > 40:
                    long_cells.append(cell.strip()[:60])
    assert not long_cells, f"bench/README.md table cells over 40 words: {long_cells}"
    for link in re.findall(r"\]\(([^)#]+)\)", text):
        if not link.startswith("http"):
            assert (RESULTS_PAGE.parent / link).exists(), f"bench/README.md links to a missing {link}"
    for name in {p.name for p in PLOTS_DIR.glob("*.png")}:
        assert f"plots/{name}" in text, f"bench/README.md does not show plots/{name}"
