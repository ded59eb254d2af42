"""scripts/build_wheels.sh (issue 18): the client wheel carries libkvstrata_copy.so, so it is a
platform wheel repaired to a manylinux tag (py3-none-manylinux_*_<arch>: no Python ABI in the
library), not py3-none-any with an x86-64 .so inside; KVSTRATA_NATIVE=0 gives the explicit
pure wheel (py3-none-any, no .so; stream_copy falls back to memmove). The connectors are
pure wheels. scripts/bundle_python.sh still builds the kvstrata-*.whl the GPU scripts glob.
Every build runs from a temporary directory: nothing is written into the checkout."""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, List

import pytest

REPO = Path(__file__).resolve().parents[2]
LIBRARY = "kvstrata/_generated/libkvstrata_copy.so"
ELF_MACHINES = {"x86_64": 62, "aarch64": 183, "ppc64le": 21, "s390x": 22}


def run_script(script: str, *args: str, cwd: Path = REPO, **env: str) -> str:
    full_env = dict(os.environ, PYTHON=sys.executable, **env)
    out = subprocess.run(["bash", str(cwd / script), *args], cwd=cwd, env=full_env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{script} {args}: rc {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout + out.stderr


def wheel_info(path: Path) -> Dict[str, List[str]]:
    """The WHEEL file's fields (Tag repeats)."""
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
        fields: Dict[str, List[str]] = {}
        for line in z.read(name).decode().splitlines():
            if ": " in line:
                key, value = line.split(": ", 1)
                fields.setdefault(key, []).append(value)
        return fields


def tags_of(path: Path) -> "tuple[str, str, List[str]]":
    """(python tag, abi tag, platform tags) from a wheel file name."""
    python_tag, abi, plats = path.name[:-len(".whl")].split("-")[-3:]
    return python_tag, abi, plats.split(".")


def native_in(site: Path) -> str:
    """kvstrata.stream_copy.NATIVE, and a copy through copy_pieces, imported from `site`."""
    code = ("import ctypes, sys; sys.path.insert(0, sys.argv[1]); from kvstrata import stream_copy;"
            "assert stream_copy.__file__.startswith(sys.argv[1]), stream_copy.__file__;"
            "src = ctypes.create_string_buffer(bytes(range(256)) * 4096);"
            "dst = ctypes.create_string_buffer(len(src));"
            "stream_copy.copy_pieces([(ctypes.addressof(dst), ctypes.addressof(src), len(src))]);"
            "assert dst.raw == src.raw; print(stream_copy.NATIVE)")
    env = dict(os.environ)
    env.pop("KVSTRATA_NATIVE_COPY", None)
    out = subprocess.run([sys.executable, "-c", code, str(site)], env=env, cwd=site,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    if shutil.which("c++") is None and "CXX" not in os.environ:
        pytest.fail("no C++ compiler: scripts/setup.sh installs build-essential")
    try:
        import auditwheel  # noqa: F401
    except ImportError:
        pytest.fail("auditwheel is missing from this environment: bash scripts/setup_python.sh")
    out = tmp_path_factory.mktemp("dist")
    run_script("scripts/build_wheels.sh", KVSTRATA_DIST_DIR=str(out))
    return out


def test_builds_every_wheel_into_dist(dist):
    names = sorted(p.name for p in dist.glob("*.whl"))
    assert len(names) == 3, names
    assert re.fullmatch(r"kvstrata-0\.1\.0-py3-none-\S+\.whl", names[0]), names
    assert names[1:] == ["kvstrata_sglang-0.1.0-py3-none-any.whl",
                         "kvstrata_vllm-0.1.0-py3-none-any.whl"]
    # The GPU scripts' glob (scripts/gpu_run.sh, gpu_vllm.sh) matches only the client.
    assert [p.name for p in dist.glob("kvstrata-*.whl")] == [names[0]]


def test_client_wheel_is_a_manylinux_platform_wheel(dist):
    (wheel,) = dist.glob("kvstrata-*.whl")
    machine = platform.machine()
    python_tag, abi, plats = tags_of(wheel)
    assert (python_tag, abi) == ("py3", "none"), wheel.name  # The library has no Python ABI.
    assert plats and all(re.fullmatch(rf"manylinux(_\d+_\d+|\d+)_{machine}", p) for p in plats), \
        wheel.name
    info = wheel_info(wheel)
    assert info["Root-Is-Purelib"] == ["false"]
    assert sorted(info["Tag"]) == sorted(f"py3-none-{p}" for p in plats)


def test_client_wheel_contents(dist):
    (wheel,) = dist.glob("kvstrata-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        library = z.read(LIBRARY)
    modules = {f"kvstrata/{p.name}" for p in (REPO / "client/python/kvstrata").glob("*.py")}
    assert modules <= names, modules - names
    assert {LIBRARY, "kvstrata/_generated/kvstrata_v1.desc", "kvstrata/py.typed",
            "kvstrata/_generated/native_src/client/cpp/block_copy.cc"} <= names
    assert any(n.startswith("kvstrata/_generated/proto/kvstrata/v1/") for n in names)
    # Nothing grafted by auditwheel (the library needs only glibc and libstdc++), no
    # .data/ scheme directories, nothing but the package and its dist-info.
    assert {n.split("/")[0] for n in names} == {"kvstrata", "kvstrata-0.1.0.dist-info"}, names
    # The library is an ELF shared object for this machine (e_type 3, e_machine).
    assert library[:4] == b"\x7fELF" and int.from_bytes(library[16:18], "little") == 3
    expected = ELF_MACHINES.get(platform.machine())
    if expected is not None:
        assert int.from_bytes(library[18:20], "little") == expected


def test_client_wheel_loads_its_library(dist, tmp_path):
    (wheel,) = dist.glob("kvstrata-*.whl")
    zipfile.ZipFile(wheel).extractall(tmp_path)
    assert native_in(tmp_path) == "True"


def test_connector_wheels_are_pure(dist):
    for name, package in (("kvstrata_vllm", "kvstrata_vllm"), ("kvstrata_sglang", "kvstrata_sglang")):
        (wheel,) = dist.glob(f"{name}-*.whl")
        assert wheel_info(wheel)["Root-Is-Purelib"] == ["true"]
        with zipfile.ZipFile(wheel) as z:
            names = set(z.namelist())
        sources = REPO / ("connector_vllm" if "vllm" in name else "connector_sglang") / package
        assert {f"{package}/{p.name}" for p in sources.glob("*.py")} <= names
        assert not any(n.endswith(".so") for n in names)


def test_pure_client_wheel_is_explicit(tmp_path):
    """KVSTRATA_NATIVE=0: py3-none-any without the library; copies use memmove."""
    out = tmp_path / "dist"
    log = run_script("scripts/build_wheels.sh", "kvstrata", KVSTRATA_DIST_DIR=str(out),
                     KVSTRATA_NATIVE="0")
    assert "pure wheel" in log
    (wheel,) = out.glob("*.whl")
    assert wheel.name == "kvstrata-0.1.0-py3-none-any.whl"
    assert wheel_info(wheel)["Root-Is-Purelib"] == ["true"]
    with zipfile.ZipFile(wheel) as z:
        assert not any(n.endswith(".so") for n in z.namelist())
        z.extractall(tmp_path / "site")
    assert native_in(tmp_path / "site") == "False"


def test_bundle_python_still_builds_the_gpu_wheel(tmp_path):
    """scripts/bundle_python.sh in a copy of the sources (it writes .bundle/wheels/)."""
    for rel in ("scripts/bundle_python.sh", "client/cpp/block_copy.h", "client/cpp/block_copy.cc"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, tmp_path / rel)
    ignore = shutil.ignore_patterns("build", "*.egg-info", "_generated", "__pycache__")
    shutil.copytree(REPO / "client/python", tmp_path / "client/python", ignore=ignore)
    shutil.copytree(REPO / "proto", tmp_path / "proto", ignore=ignore)
    run_script("scripts/bundle_python.sh", cwd=tmp_path)
    (wheel,) = (tmp_path / ".bundle/wheels").glob("kvstrata-*.whl")
    python_tag, abi, plats = tags_of(wheel)
    assert (python_tag, abi) == ("py3", "none") and plats != ["any"], wheel.name
    with zipfile.ZipFile(wheel) as z:
        assert LIBRARY in z.namelist()
