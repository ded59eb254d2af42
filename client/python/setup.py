"""Build of the kvstrata client: compiles proto/ into a descriptor set at build time.

The package ships no protoc-generated _pb2 modules (they pin the protobuf runtime version);
instead build_py runs grpc_tools.protoc once and stores a serialized FileDescriptorSet that
kvstrata/_proto.py turns into message classes at import time.
"""
from __future__ import annotations

import shutil
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


class BuildPyWithProto(build_py):
    """build_py that generates kvstrata/_generated/kvstrata_v1.desc first."""

    def run(self) -> None:
        proto_root = sync_proto_sources()
        compile_descriptor_set(proto_root, DESCRIPTOR)
        super().run()
        # Package data is collected lazily; copy explicitly so the wheel always has it.
        for src in [DESCRIPTOR, *sorted(VENDORED_PROTO.glob(PROTO_GLOB))]:
            dst = Path(self.build_lib) / src.relative_to(HERE)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


class SdistWithProto(sdist):
    """sdist that vendors the .proto files so the archive builds without the repository."""

    def run(self) -> None:
        sync_proto_sources()
        super().run()


setup(cmdclass={"build_py": BuildPyWithProto, "sdist": SdistWithProto})
