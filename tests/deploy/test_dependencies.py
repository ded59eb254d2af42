"""Issue 18: Boost and liburing were required/installed/shipped but never used. Neither is
in CMake, scripts/setup.sh or the container image now; if a source file starts to include
them, this test says to add them back everywhere."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("daemon", "client", "bench", "tests")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](boost/|liburing)', re.MULTILINE)


def sources():
    for top in SOURCE_DIRS:
        for path in (REPO / top).rglob("*"):
            if path.suffix in {".cc", ".h", ".cu", ".cpp", ".hpp"} and "build" not in path.parts:
                yield path


def test_no_source_includes_boost_or_liburing():
    users = [str(p.relative_to(REPO)) for p in sources() if INCLUDE.search(p.read_text(errors="replace"))]
    assert not users, (f"{users} include Boost/liburing: add find_package/pkg_check_modules in "
                       "cmake/KvstrataDependencies.cmake, the -dev package in scripts/setup.sh "
                       "and the runtime package in deploy/container/Dockerfile")


def test_unused_dependencies_are_not_installed():
    cmake = (REPO / "cmake/KvstrataDependencies.cmake").read_text()
    assert "Boost" not in cmake and "uring" not in cmake
    setup = (REPO / "scripts/setup.sh").read_text()
    assert "libboost" not in setup and "liburing" not in setup
    dockerfile = (REPO / "deploy/container/Dockerfile").read_text()
    assert "libboost" not in dockerfile and "liburing" not in dockerfile
