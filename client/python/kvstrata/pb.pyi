# Type stubs of kvstrata.pb: the messages, enums and enum values of the proto package
# kvstrata.v1, as protoc's --pyi_out writes them at build time (kvstrata/v1/*_pb2.pyi).
from kvstrata.v1.admin_pb2 import *
from kvstrata.v1.common_pb2 import *
from kvstrata.v1.control_pb2 import *
