"""Message classes and RPC table built at import time from the generated descriptor set.

No protoc-generated _pb2 modules are used: they carry protobuf runtime version checks that
break across majors. A private DescriptorPool keeps us apart from other users of the same
names (e.g. grpcio-health-checking registering grpc.health.v1 in the default pool).
"""
from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from typing import Dict, Iterable, Tuple

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal import enum_type_wrapper

PACKAGE = "kvstrata.v1"
DESCRIPTOR_FILE = "kvstrata_v1.desc"
HEALTH_SERVICE = "grpc.health.v1.Health"


@dataclass(frozen=True)
class Method:
    """One RPC: gRPC path, request/response classes and whether the server streams."""

    service: str
    name: str
    path: str
    request: type
    response: type
    server_streaming: bool


def _read_descriptor_set() -> bytes:
    """The serialized FileDescriptorSet written by setup.py's build step."""
    resource = importlib.resources.files("kvstrata").joinpath("_generated").joinpath(DESCRIPTOR_FILE)
    try:
        return resource.read_bytes()
    except (FileNotFoundError, OSError) as err:
        raise ImportError(
            f"kvstrata: {DESCRIPTOR_FILE} is missing; install the package with pip "
            "(`pip install client/python`), whose build step runs protoc") from err


def _health_file() -> descriptor_pb2.FileDescriptorProto:
    """grpc/health/v1/health.proto (Check only), so no grpcio-health-checking is needed."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="kvstrata_private/grpc_health_v1.proto", package="grpc.health.v1", syntax="proto3")
    field = descriptor_pb2.FieldDescriptorProto
    request = fdp.message_type.add(name="HealthCheckRequest")
    request.field.add(name="service", json_name="service", number=1,
                      type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    response = fdp.message_type.add(name="HealthCheckResponse")
    status = response.enum_type.add(name="ServingStatus")
    for number, name in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        status.value.add(name=name, number=number)
    response.field.add(name="status", json_name="status", number=1, type=field.TYPE_ENUM,
                       label=field.LABEL_OPTIONAL,
                       type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus")
    fdp.service.add(name="Health").method.add(
        name="Check", input_type=".grpc.health.v1.HealthCheckRequest",
        output_type=".grpc.health.v1.HealthCheckResponse")
    return fdp


class ProtoRegistry:
    """Classes for every message and enum of the loaded files, and every RPC."""

    def __init__(self, files: Iterable[descriptor_pb2.FileDescriptorProto]) -> None:
        self.pool = descriptor_pool.DescriptorPool()
        self._factory = None
        self.messages: Dict[str, type] = {}  # Full name -> class.
        self.enums: Dict[str, enum_type_wrapper.EnumTypeWrapper] = {}  # Full name -> wrapper.
        self.methods: Dict[Tuple[str, str], Method] = {}  # (service full name, rpc) -> Method.
        files = list(files)
        for fdp in files:  # protoc --include_imports orders dependencies first.
            self.pool.AddSerializedFile(fdp.SerializeToString())
        for fdp in files:
            prefix = f"{fdp.package}." if fdp.package else ""
            for msg in fdp.message_type:
                self.messages[prefix + msg.name] = self._message_class(prefix + msg.name)
            for enum in fdp.enum_type:
                self.enums[prefix + enum.name] = enum_type_wrapper.EnumTypeWrapper(
                    self.pool.FindEnumTypeByName(prefix + enum.name))
            for service in fdp.service:
                for rpc in service.method:
                    self._add_method(prefix + service.name, rpc)

    def _message_class(self, full_name: str) -> type:
        descriptor = self.pool.FindMessageTypeByName(full_name)
        if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
            return message_factory.GetMessageClass(descriptor)
        if self._factory is None:
            self._factory = message_factory.MessageFactory(self.pool)
        return self._factory.GetPrototype(descriptor)

    def _add_method(self, service: str, rpc: descriptor_pb2.MethodDescriptorProto) -> None:
        def cls(type_name: str) -> type:
            name = type_name.lstrip(".")
            if name not in self.messages:
                self.messages[name] = self._message_class(name)
            return self.messages[name]

        self.methods[(service, rpc.name)] = Method(
            service=service, name=rpc.name, path=f"/{service}/{rpc.name}",
            request=cls(rpc.input_type), response=cls(rpc.output_type),
            server_streaming=rpc.server_streaming)

    def method(self, service: str, name: str) -> Method:
        """The RPC `name` of `service` (full name, e.g. "kvstrata.v1.Control")."""
        return self.methods[(service, name)]

    def package_members(self, package: str) -> Dict[str, object]:
        """Short name -> class/enum wrapper/enum value for everything in `package`."""
        prefix = package + "."
        members: Dict[str, object] = {}
        for full, cls in self.messages.items():
            if full.startswith(prefix) and "." not in full[len(prefix):]:
                members[full[len(prefix):]] = cls
        for full, wrapper in self.enums.items():
            if full.startswith(prefix):
                members[full[len(prefix):]] = wrapper
                members.update((name, number) for name, number in wrapper.items())
        return members


def _load() -> ProtoRegistry:
    fds = descriptor_pb2.FileDescriptorSet.FromString(_read_descriptor_set())
    return ProtoRegistry([*fds.file, _health_file()])


REGISTRY = _load()
