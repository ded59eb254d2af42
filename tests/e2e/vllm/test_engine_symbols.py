"""The vLLM symbols kvstrata_vllm touches exist on this vLLM with the shapes it expects
(issue 47 item 4). CI runs this file on vLLM 0.33 and on 0.26 (scripts/test.sh), so a
connector change that uses a symbol one of them lacks fails here, not on a user's engine.
tests/e2e/engine_symbols.py says what is checked."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import engine_symbols as es  # noqa: E402

import vllm  # noqa: E402

PACKAGE = es.REPO / "connector_vllm" / "kvstrata_vllm"
IMPORTS = es.engine_imports(PACKAGE, ("vllm",))
# Where the connector takes a newer vLLM's symbol only when it is there: the versions
# known to lack it (a fallback found missing elsewhere fails, so the list stays true).
OPTIONAL_MISSING = {
    ("vllm.v1.metrics.cache_hit_source", "CacheHitSource"):
        {"0.26.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0"},
    ("vllm.distributed.kv_transfer.kv_connector.v1.base", "KVConnectorTransferResults"):
        {"0.26.0", "0.27.1", "0.28.0", "0.29.0"},
}


def test_the_scan_finds_the_connectors_imports():
    names = {(i.module, i.name) for i in IMPORTS}
    assert ("vllm.distributed.kv_transfer.kv_connector.v1.base", "KVConnectorBase_V1") in names
    assert len(IMPORTS) >= 10


@pytest.mark.parametrize("imp", IMPORTS, ids=lambda i: f"{i.module}.{i.name}@{i.where}")
def test_every_import_resolves_where_expected(imp):
    """A required import resolves; a fallback resolves exactly where OPTIONAL_MISSING says."""
    problem = es.import_problem(imp, vllm.__version__, OPTIONAL_MISSING)
    assert problem is None, "vLLM " + problem


def test_the_connectors_overrides_take_what_vllm_passes():
    modules = sorted({f"kvstrata_vllm.{p.relative_to(PACKAGE).with_suffix('').as_posix()}"
                      .replace("/", ".").replace(".__init__", "")
                      for p in es.package_files(PACKAGE)})
    pairs = es.engine_subclasses(modules, ("vllm",))
    assert any(base.__name__ == "KVConnectorBase_V1" for _, base in pairs), pairs
    problems = [p for cls, base in pairs for p in es.override_problems(cls, base)]
    assert not problems, f"vLLM {vllm.__version__}:\n" + "\n".join(problems)


def test_the_override_check_sees_drift():
    """What the check reports when an engine's base changes under the connector."""
    import abc

    class Base(abc.ABC):
        def get_finished(self, finished_req_ids, *, extra=None): ...

        @classmethod
        def build(cls, vllm_config, metric_types): ...

        @abc.abstractmethod
        def start_load_kv(self, forward_context, **kwargs): ...

    class Ours(Base):
        def get_finished(self, finished_ids): ...          # renamed, no `extra`

        @classmethod
        def build(cls, metric_types, vllm_config): ...     # swapped

    problems = "\n".join(es.override_problems(Ours, Base))
    assert "lacks the parameter 'finished_req_ids'" in problems
    assert "lacks the parameter 'extra'" in problems
    assert "takes 'vllm_config' at position 1, Base at 0" in problems
    assert "does not define Base.start_load_kv (abstract)" in problems

    class Fine(Base):
        def get_finished(self, finished_req_ids, *, extra=None): ...

        @classmethod
        def build(cls, vllm_config, metric_types): ...

        def start_load_kv(self, forward_context, **kwargs): ...

    assert es.override_problems(Fine, Base) == []
