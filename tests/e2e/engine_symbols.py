"""The engine symbols a connector touches, read from its source, and checked against the
engine installed in this environment (issue 47 item 4: engine-version drift caught early).

Two checks, each run by the engine's own suite on every version CI installs
(tests/e2e/vllm/test_engine_symbols.py on vLLM 0.26 and 0.33,
tests/integration/sglang/test_engine_symbols.py on SGLang 0.5.17 to 0.5.23):

- Imports. Every `from vllm... import X` / `from sglang... import X` in the package's source
  (`engine_imports`). One outside any `try` must resolve on every version; one inside a
  `try` that handles ImportError (or Exception) is a fallback the connector chose to make
  optional, and the suite reports where it does not resolve instead of failing there.
- Overrides. For each class of the package that subclasses an engine class
  (`engine_subclasses`), every method the engine's base declares and the class defines must
  take the base's parameters (the engine calls the method by the base's names and order),
  and every abstract method of the base must be defined (else the engine cannot build it).

Attribute reads on engine objects (a SchedulerOutput's fields, a Request's) are not seen
here: the suites' tests on the real Scheduler and engines cover those.
"""
from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class EngineImport:
    module: str      # e.g. vllm.distributed.kv_events
    name: str        # e.g. BlockStored ("" for `import vllm.x`)
    where: str       # file:line
    optional: bool   # inside a try that handles ImportError / Exception


def _handles_import_error(node: ast.Try) -> bool:
    for h in node.handlers:
        names = []
        if h.type is None:
            return True
        for t in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]):
            if isinstance(t, ast.Name):
                names.append(t.id)
            elif isinstance(t, ast.Attribute):
                names.append(t.attr)
        if {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"} & set(names):
            return True
    return False


def _walk(node: ast.AST, optional: bool) -> Iterator[Tuple[ast.AST, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Try):
            inner = optional or _handles_import_error(child)
            for stmt in child.body:
                yield stmt, inner
                yield from _walk(stmt, inner)
            for part in (child.handlers, child.orelse, child.finalbody):
                for stmt in part:
                    yield stmt, optional
                    yield from _walk(stmt, optional)
        else:
            yield child, optional
            yield from _walk(child, optional)


def package_files(package_dir: Path) -> List[Path]:
    return sorted(p for p in package_dir.rglob("*.py") if "build" not in p.parts)


def engine_imports(package_dir: Path, engines: Tuple[str, ...]) -> List[EngineImport]:
    """Every import of an `engines` module (e.g. ("vllm",)) in the package's source."""
    out: List[EngineImport] = []
    for path in package_files(package_dir):
        tree = ast.parse(path.read_text(), str(path))
        rel = path.relative_to(REPO)
        for node, optional in _walk(tree, False):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                    and node.module.split(".")[0] in engines:
                for alias in node.names:
                    out.append(EngineImport(node.module, alias.name, f"{rel}:{node.lineno}",
                                            optional))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in engines:
                        out.append(EngineImport(alias.name, "", f"{rel}:{node.lineno}",
                                                optional))
    return out


def resolve(imp: EngineImport) -> Optional[str]:
    """None when the import resolves in this environment, else why not."""
    try:
        module = importlib.import_module(imp.module)
    except Exception as e:  # noqa: BLE001 - any failure to import is the finding
        return f"{imp.module}: {type(e).__name__}: {e}"
    if imp.name and not hasattr(module, imp.name):
        try:   # a submodule imported by name
            importlib.import_module(f"{imp.module}.{imp.name}")
        except Exception:  # noqa: BLE001
            return f"{imp.module} has no {imp.name}"
    return None


def import_problem(imp: EngineImport, engine_version: str,
                   known_missing: Dict[Tuple[str, str], Set[str]]) -> Optional[str]:
    """None when `imp` is as the suite expects on this engine version: a required import
    resolves; an optional one resolves exactly where `known_missing` (module, name) ->
    versions does not list this version (so that list stays true). Else what is wrong."""
    why = resolve(imp)
    if not imp.optional:
        return None if why is None else f"{imp.where}: {why} (version {engine_version})"
    known = engine_version in known_missing.get((imp.module, imp.name), set())
    if (why is None) != known:
        return None
    return f"{imp.where}: version {engine_version}: " + (
        why or "resolves, but the suite's OPTIONAL_MISSING says this version lacks it")


def engine_subclasses(module_names: List[str], engines: Tuple[str, ...]) -> List[Tuple[type, type]]:
    """(class, engine base) for each class of the modules subclassing an engine class."""
    out = []
    for name in module_names:
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            for base in cls.__mro__[1:]:
                if base.__module__.split(".")[0] in engines:
                    out.append((cls, base))
                    break
    return out


def _params(fn: Any) -> Optional[List[inspect.Parameter]]:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


def override_problems(cls: type, base: type) -> List[str]:
    """Methods of `cls` that would not take the calls the engine makes through `base`, and
    abstract methods of the base `cls` leaves undefined."""
    problems = []
    engine = base.__module__.split(".")[0]
    for name, base_fn in inspect.getmembers(base, callable):
        if name.startswith("__") and name != "__init__":
            continue
        owner = next((k for k in base.__mro__ if name in k.__dict__), None)
        if owner is None or owner.__module__.split(".")[0] != engine:
            continue   # not the engine's (object.__init__, abc's): the engine set no shape
        mine = cls.__dict__.get(name)
        if mine is None:
            if getattr(base_fn, "__isabstractmethod__", False) and \
                    getattr(getattr(cls, name, None), "__isabstractmethod__", False):
                problems.append(f"{cls.__name__} does not define {base.__name__}.{name} "
                                "(abstract)")
            continue
        # Both looked up on their class: a classmethod bound (no `cls`), a method with `self`.
        theirs, ours = _params(base_fn), _params(getattr(cls, name))
        if theirs is None or ours is None:
            continue
        if any(p.kind == p.VAR_KEYWORD for p in ours) and any(p.kind == p.VAR_POSITIONAL
                                                             for p in ours):
            continue
        our_names = [p.name for p in ours if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in ours)
        for i, p in enumerate(theirs):
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            if p.name not in our_names and not takes_kwargs:
                problems.append(f"{cls.__name__}.{name} lacks the parameter {p.name!r} of "
                                f"{base.__name__}.{name}{inspect.signature(base_fn)}")
            elif p.kind == p.POSITIONAL_OR_KEYWORD and i < len(our_names) and \
                    our_names[i] != p.name and p.name in our_names:
                problems.append(f"{cls.__name__}.{name} takes {p.name!r} at position "
                                f"{our_names.index(p.name)}, {base.__name__} at {i}")
        base_required = {p.name for p in theirs if p.default is p.empty
                         and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        for p in ours:
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) \
                    and p.name not in base_required and p.name != "self":
                problems.append(f"{cls.__name__}.{name} requires {p.name!r}, which "
                                f"{base.__name__}.{name} does not pass")
    return problems
