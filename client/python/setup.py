"""Build of the kvstrata client: compiles proto/ into a descriptor set at build time.

The package ships no protoc-generated _pb2 modules (they pin the protobuf runtime version);
instead build_py runs grpc_tools.protoc once and stores a serialized FileDescriptorSet that
kvstrata/_proto.py turns into message classes at import time. The same protoc run writes
type stubs (--pyi_out) for the messages: kvstrata/v1/*_pb2.pyi (the proto package
kvstrata.v1, stub-only), re-exported by kvstrata/pb.pyi, so type checkers and IDEs know
every message, field and enum of kvstrata.pb.

build_py also compiles client/cpp/block_copy.cc (streaming-store copies) alone into
kvstrata/_generated/libkvstrata_copy.so, a plain C-ABI library that kvstrata/stream_copy.py
loads with ctypes (no Python ABI in it, so one build serves every CPython).

The wheel says which of the two it is:
- with the library: a platform wheel, py3-none-<platform> (e.g. py3-none-linux_x86_64,
  which scripts/build_wheels.sh repairs to a manylinux tag with auditwheel): any CPython 3,
  but only that OS and CPU;
- without it: a pure wheel, py3-none-any, with no .so inside; kvstrata.stream_copy then
  copies with ctypes.memmove and stream_copy.NATIVE is False.
KVSTRATA_NATIVE picks: unset = build the library when a C++ compiler works, else warn and
build the pure wheel; 1 = the library is required (a failed compile is an error; the older
KVSTRATA_REQUIRE_NATIVE=1 means the same); 0 = never build it (the pure wheel, e.g. for a
platform this build machine cannot compile for).
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

try:  # setuptools >= 70.1 has bdist_wheel; older ones take it from the wheel package.
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover - older setuptools
    from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
GENERATED = HERE / "kvstrata" / "_generated"
DESCRIPTOR = GENERATED / "kvstrata_v1.desc"
VENDORED_PROTO = GENERATED / "proto"  # Copy of proto/ kept inside the package (for sdists).
REPO_PROTO = HERE.parent.parent / "proto"
PROTO_GLOB = "kvstrata/v1/*.proto"
NATIVE_SOURCES = ("client/cpp/block_copy.h", "client/cpp/block_copy.cc")
VENDORED_NATIVE = GENERATED / "native_src"  # Copy of NATIVE_SOURCES (for sdists).
NATIVE_LIBRARY = GENERATED / "libkvstrata_copy.so"
STUBS = HERE  # protoc --pyi_out writes kvstrata/v1/*_pb2.pyi under it
STUB_GLOB = "kvstrata/v1/*.pyi"


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
    """Run grpc_tools.protoc to write a FileDescriptorSet (imports included) to out, and
    the messages' type stubs (kvstrata/v1/*_pb2.pyi) under STUBS."""
    try:
        from grpc_tools import protoc
    except ImportError as err:  # pragma: no cover - build requirement missing
        raise RuntimeError("kvstrata: building needs grpcio-tools (pip install grpcio-tools)") from err
    files = [str(p.relative_to(proto_root)) for p in sorted(proto_root.glob(PROTO_GLOB))]
    out.parent.mkdir(parents=True, exist_ok=True)
    stubs = STUBS / "kvstrata" / "v1"
    stubs.mkdir(parents=True, exist_ok=True)
    for stale in stubs.glob("*_pb2.pyi"):
        stale.unlink()
    (stubs / "__init__.pyi").write_text("")
    args = ["grpc_tools.protoc", f"-I{proto_root}", f"--descriptor_set_out={out}",
            "--include_imports", f"--pyi_out={STUBS}", *files]
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


def native_mode() -> str:
    """KVSTRATA_NATIVE: "auto" (unset), "1" (required) or "0" (never)."""
    mode = os.environ.get("KVSTRATA_NATIVE", "").strip()
    if os.environ.get("KVSTRATA_REQUIRE_NATIVE") == "1" and mode != "0":
        mode = "1"
    if mode not in ("", "0", "1"):
        raise RuntimeError(f"kvstrata: KVSTRATA_NATIVE must be 0, 1 or unset, not {mode!r}")
    return mode or "auto"


def compile_native_library(source_root: Path, out: Path) -> bool:
    """Build the streaming-copy library; True when it was built. See native_mode()."""
    out.unlink(missing_ok=True)  # Never ship a library left over from an earlier build.
    mode = native_mode()
    if mode == "0":
        print("kvstrata: KVSTRATA_NATIVE=0: no streaming-copy library; pure wheel "
              "(py3-none-any), copies use memmove")
        return False
    cxx = shlex.split(os.environ.get("CXX", "c++"))
    args = [*cxx, "-O2", "-std=c++17", "-fPIC", "-shared", f"-I{source_root}",
            str(source_root / NATIVE_SOURCES[1]), "-o", str(out)]
    try:
        subprocess.run(args, check=True)
    except (OSError, subprocess.CalledProcessError) as err:
        if mode == "1":
            raise RuntimeError(f"kvstrata: {' '.join(args)} failed: {err}") from err
        print(f"kvstrata: WARNING: no streaming-copy library ({err}); pure wheel "
              "(py3-none-any), copies use memmove (KVSTRATA_NATIVE=1 makes this an error)")
        out.unlink(missing_ok=True)
        return False
    return True


class BuildPyWithProto(build_py):
    """build_py that generates kvstrata/_generated/kvstrata_v1.desc and
    libkvstrata_copy.so first."""

    def run(self) -> None:
        proto_root = sync_proto_sources()
        compile_descriptor_set(proto_root, DESCRIPTOR)
        native_built = compile_native_library(sync_native_sources(), NATIVE_LIBRARY)
        self.distribution.kvstrata_native = native_built  # bdist_wheel's tag follows it.
        super().run()
        # Package data is collected lazily; copy explicitly so the wheel always has it.
        built_library = Path(self.build_lib) / NATIVE_LIBRARY.relative_to(HERE)
        if not native_built:  # A pure wheel must not carry an earlier build's library.
            built_library.unlink(missing_ok=True)
        native = [NATIVE_LIBRARY] if native_built else []
        native_src = [VENDORED_NATIVE / f for f in NATIVE_SOURCES]
        stubs = sorted(STUBS.glob(STUB_GLOB))
        for src in [DESCRIPTOR, *sorted(VENDORED_PROTO.glob(PROTO_GLOB)), *native, *native_src,
                    *stubs]:
            dst = Path(self.build_lib) / src.relative_to(HERE)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


class BdistWheelNative(bdist_wheel):
    """bdist_wheel whose tag says whether libkvstrata_copy.so is inside: py3-none-<platform>
    with it (the library has no Python ABI, so any CPython 3 of that platform), py3-none-any
    without it. The build runs first, so the tag follows what build_py actually built."""

    def run(self) -> None:
        if not self.skip_build:
            self.run_command("build")  # bdist_wheel.run's own "build" is then a no-op.
            native = getattr(self.distribution, "kvstrata_native", False)
        else:
            native = (Path(self.get_finalized_command("build").build_lib)
                      / NATIVE_LIBRARY.relative_to(HERE)).is_file()
        self.root_is_pure = not native
        if native:  # install (reinitialized by super().run()) then puts the package in platlib.
            self.distribution.has_ext_modules = lambda: True
        super().run()

    def get_tag(self) -> tuple:
        impl, abi, plat = super().get_tag()
        if self.root_is_pure:
            return impl, abi, plat  # py3-none-any
        return "py3", "none", plat


class SdistWithProto(sdist):
    """sdist that vendors the .proto files so the archive builds without the repository."""

    def run(self) -> None:
        sync_proto_sources()
        sync_native_sources()
        super().run()


setup(cmdclass={"build_py": BuildPyWithProto, "bdist_wheel": BdistWheelNative,
                 "sdist": SdistWithProto})
