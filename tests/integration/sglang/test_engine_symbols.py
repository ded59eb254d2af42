"""The SGLang symbols kvstrata_sglang touches exist on this SGLang with the shapes it
expects (issue 47 item 4). CI runs this file on every SGLang of scripts/sglang_versions.txt
(scripts/test.sh). tests/e2e/engine_symbols.py says what is checked."""
from __future__ import annotations

import sys
from importlib.metadata import version
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
import engine_symbols as es  # noqa: E402

import sglang  # noqa: E402, F401

SGLANG = getattr(sglang, "__version__", None) or version("sglang")
PACKAGE = es.REPO / "connector_sglang" / "kvstrata_sglang"
IMPORTS = es.engine_imports(PACKAGE, ("sglang",))
# Where the backend takes a symbol only when this SGLang has it: the versions known to lack
# it (a fallback found missing elsewhere fails, so the list stays true).
OPTIONAL_MISSING: dict = {}


def test_the_scan_finds_the_backends_imports():
    names = {(i.module, i.name) for i in IMPORTS}
    assert ("sglang.srt.mem_cache.hicache_storage", "HiCacheStorage") in names


@pytest.mark.parametrize("imp", IMPORTS, ids=lambda i: f"{i.module}.{i.name}@{i.where}")
def test_every_import_resolves_where_expected(imp):
    """A required import resolves; a fallback resolves exactly where OPTIONAL_MISSING says."""
    problem = es.import_problem(imp, SGLANG, OPTIONAL_MISSING)
    assert problem is None, "SGLang " + problem


def test_the_backends_overrides_take_what_sglang_passes():
    modules = sorted(f"kvstrata_sglang.{p.stem}" for p in es.package_files(PACKAGE)
                     if p.stem != "__init__")
    pairs = es.engine_subclasses(modules, ("sglang",))
    assert any(base.__name__ == "HiCacheStorage" for _, base in pairs), pairs
    problems = [p for cls, base in pairs for p in es.override_problems(cls, base)]
    assert not problems, f"SGLang {SGLANG}:\n" + "\n".join(problems)
