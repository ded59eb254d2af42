"""Build of the kvstrata client: compiles proto/ into a descriptor set at build time.

The package ships no protoc-generated _pb2 modules (they pin the protobuf runtime version);
instead build_py runs grpc_tools.protoc once and stores a serialized FileDescriptorSet that
kvstrata/_proto.py turns into message classes at import time.

build_py also compiles client/cpp/block_copy.cc (streaming-store copies) alone into
kvstrata/_generated/libkvstrata_copy.so, a plain C-ABI library that kvstrata/stream_copy.py
loads with ctypes (no Python ABI in it, so one build serves every CPython). Without a C++
compiler the package still builds and copies with memmove instead; set
KVSTRATA_REQUIRE_NATIVE=1 to make that an error.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
GENERATED = HERE / "kvstrata" / "_generated"
DESCRIPTOR = GENERATED / "kvstrata_v1.desc"
VENDORED_PROTO = GENERATED / "proto"  # Copy of proto/ kept inside the package (for sdists).
REPO_PROTO = HERE.parent.parent / "proto"
PROTO_GLOB = "kvstrata/v1/*.proto"
NATIVE_SOURCES = ("client/cpp/block_copy.h", "client/cpp/block_copy.cc")
VENDORED_NATIVE = GENERATED / "native_src"  # Copy of NATIVE_SOURCES (for sdists).
NATIVE_LIBRARY = GENERATED / "libkvstrata_copy.so"


def sync_proto_sources() -> Path:
    """Copy the repository's proto/ into the package; return the root protoc should use."""
    repo_files = sorted(REPO_PROTO.glob(PROTO_GLOB))
    if repo_files:
        target = VENDORED_PROTO / "kvstrata" / "v1"
        target.mkdir(parents=True, exist_ok=True)
        for stale in target.glob("*.proto"):
            stale.unlink()
        for src in repo_files:
            shutil.copy2(src, target / src.name)
        return REPO_PROTO
    if sorted(VENDORED_PROTO.glob(PROTO_GLOB)):
        return VENDORED_PROTO  # Building from an sdist: only the vendored copy exists.
    raise RuntimeError(f"kvstrata: no .proto files in {REPO_PROTO} or {VENDORED_PROTO}")


def compile_descriptor_set(proto_root: Path, out: Path) -> None:
    """Run grpc_tools.protoc to write a FileDescriptorSet (imports included) to out."""
    try:
        from grpc_tools import protoc
    except ImportError as err:  # pragma: no cover - build requirement missing
        raise RuntimeError("kvstrata: building needs grpcio-tools (pip install grpcio-tools)") from err
    files = [str(p.relative_to(proto_root)) for p in sorted(proto_root.glob(PROTO_GLOB))]
    out.parent.mkdir(parents=True, exist_ok=True)
    args = ["grpc_tools.protoc", f"-I{proto_root}", f"--descriptor_set_out={out}",
            "--include_imports", *files]
    if protoc.main(args) != 0:
        raise RuntimeError(f"kvstrata: protoc failed: {' '.join(args)}")


def sync_native_sources() -> Path:
    """Copy the repository's block_copy sources into the package; return their root."""
    repo_root = HERE.parent.parent
    if all((repo_root / f).is_file() for f in NATIVE_SOURCES):
        for f in NATIVE_SOURCES:
            (VENDORED_NATIVE / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo_root / f, VENDORED_NATIVE / f)
        return repo_root
    return VENDORED_NATIVE


def compile_native_library(source_root: Path, out: Path) -> None:
    """Build the streaming-copy library; without a compiler, warn and build none."""
    cxx = shlex.split(os.environ.get("CXX", "c++"))
    args = [*cxx, "-O2", "-std=c++17", "-fPIC", "-shared", f"-I{source_root}",
            str(source_root / NATIVE_SOURCES[1]), "-o", str(out)]
    try:
        subprocess.run(args, check=True)
    except (OSError, subprocess.CalledProcessError) as err:
        if os.environ.get("KVSTRATA_REQUIRE_NATIVE") == "1":
            raise RuntimeError(f"kvstrata: {' '.join(args)} failed: {err}") from err
        print(f"kvstrata: WARNING: no streaming-copy library ({err}); copies use memmove")
        out.unlink(missing_ok=True)


class BuildPyWithProto(build_py):
    """build_py that generates kvstrata/_generated/kvstrata_v1.desc and
    libkvstrata_copy.so first."""

    def run(self) -> None:
        proto_root = sync_proto_sources()
        compile_descriptor_set(proto_root, DESCRIPTOR)
        compile_native_library(sync_native_sources(), NATIVE_LIBRARY)
        super().run()
        # Package data is collected lazily; copy explicitly so the wheel always has it.
        native = [NATIVE_LIBRARY] if NATIVE_LIBRARY.is_file() else []
        native_src = [VENDORED_NATIVE / f for f in NATIVE_SOURCES]
        for src in [DESCRIPTOR, *sorted(VENDORED_PROTO.glob(PROTO_GLOB)), *native, *native_src]:
            dst = Path(self.build_lib) / src.relative_to(HERE)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


class SdistWithProto(sdist):
    """sdist that vendors the .proto files so the archive builds without the repository."""

    def run(self) -> None:
        sync_proto_sources()
        sync_native_sources()
        super().run()


setup(cmdclass={"build_py": BuildPyWithProto, "sdist": SdistWithProto})
