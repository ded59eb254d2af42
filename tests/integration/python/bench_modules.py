"""Loading a bench/ script as a module under a name of its own.

Several bench folders have modules of the same name (bench/node and bench/vllm_gpu both have
report.py and run.py); a test that put a folder on sys.path and imported `report` would get
whichever folder came first. load(folder, name) imports bench/<folder>/<name>.py as
`<folder>_<name>`, with the folder on sys.path only while it runs (for that module's own
imports), so other tests' imports are untouched."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[3] / "bench"


def load(folder: str, name: str) -> ModuleType:
    where = BENCH / folder
    spec = importlib.util.spec_from_file_location(f"{folder}_{name}", where / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(where))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(where))
    return module
