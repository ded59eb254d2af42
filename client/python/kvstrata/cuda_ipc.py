"""CUDA IPC for GPU mode: allocations exported as IPC handles, the GPU's identity, IPC
events and per-layer flags (kvstrata.cuda describes and registers the KV caches with them).

Every tensor must be a CUDA tensor of one device, allocated by PyTorch's native caching
allocator (or plain cudaMalloc): legacy CUDA IPC cannot export expandable segments
(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), cudaMallocAsync pools or cuMem (VMM)
allocations such as vLLM's sleep-mode pool. Keep the tensors alive while registered.

IPC handles: by default ("driver") each allocation is found and exported through the CUDA
driver (libcuda.so.1 through ctypes: cuMemGetAddressRange gives the cudaMalloc'ed segment
base and size, cuIpcGetMemHandle its handle) — no private torch API and no side effects.
exporter="torch" uses `tensor.untyped_storage()._share_cuda_()` instead (handle bytes of the
caching-allocator segment, raw 64 bytes in older torch, 2-byte version/type prefix + 64 in
torch >= 2.5), still with cuMemGetAddressRange for the size. Note that _share_cuda_ also
sets up torch's producer-side IPC reference counting, which no torch consumer will ever
release here: the storage's memory then stays in torch's "limbo" after the tensor is freed
(harmless for a KV cache that lives as long as the engine, a leak for short-lived tensors).

torch is imported only by the functions that need it (gpu_uuid, the default exporters,
IpcEventPool, LayerFlags), so this module imports fine without it.
"""
from __future__ import annotations

import ctypes
import threading
import uuid as _uuid
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from . import pb

CUDA_IPC_HANDLE_BYTES = 64
_SHAREABLE_CUDA_MALLOC = ord("c")
_SHAREABLE_EXPANDABLE_SEGMENT = ord("e")


@dataclass(frozen=True)
class IpcAllocation:
    """A CUDA allocation as exported: IPC handle, device address of its start, size."""

    handle: bytes
    base: int
    size: int
    source: str = ""   # how it was found (diagnostics)

    def contains(self, ptr: int, nbytes: int) -> bool:
        return self.base <= ptr and ptr + nbytes <= self.base + self.size


Exporter = Callable[[Any], IpcAllocation]


# ---------------------------------------------------------------------- GPU identity


def _device_of(t: Any, what: str) -> int:
    device = getattr(t, "device", None)
    kind = getattr(device, "type", None)
    if kind != "cuda":
        raise ValueError(f"{what} is on {device}: GPU mode needs CUDA tensors")
    index = getattr(device, "index", None)
    return 0 if index is None else int(index)


def format_gpu_uuid(raw: bytes) -> str:
    """16 uuid bytes -> "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lowercase, as the daemon)."""
    raw = bytes(raw)
    if len(raw) != 16:
        raise ValueError(f"a GPU uuid has 16 bytes, got {len(raw)}")
    return "GPU-" + str(_uuid.UUID(bytes=raw))


def gpu_uuid(device_index: int) -> str:
    """The "GPU-..." uuid of a CUDA device of this process (torch's device index)."""
    import torch

    props = torch.cuda.get_device_properties(device_index)
    u = getattr(props, "uuid", None)
    raw = getattr(u, "bytes", None)
    if raw is not None and len(raw) == 16:
        return format_gpu_uuid(bytes(bytearray(raw)))
    if u is not None:
        text = str(u).strip().lower()
        for prefix in ("gpu-", "mig-"):
            if text.startswith(prefix):
                text = text[len(prefix):]
        try:
            return "GPU-" + str(_uuid.UUID(text))
        except ValueError:
            pass
    return format_gpu_uuid(_driver().device_uuid(device_index))


def _uuid_of(device_index: int) -> str:
    return gpu_uuid(device_index)


# ---------------------------------------------------------------------- exporters


class CudaDriverError(RuntimeError):
    """A CUDA driver call (through libcuda.so.1) failed."""


class _Driver:
    """The few CUDA driver calls needed here, through ctypes on libcuda.so.1."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as err:
            raise CudaDriverError(f"cannot load libcuda.so.1 (no NVIDIA driver?): {err}") from err
        self._lock = threading.Lock()
        self._wait_value64: Any = None
        self._check("cuInit", self.lib.cuInit(ctypes.c_uint(0)))

    def _error_name(self, rc: int) -> str:
        name = ctypes.c_char_p()
        try:
            if self.lib.cuGetErrorName(ctypes.c_int(rc), ctypes.byref(name)) == 0 and name.value:
                return name.value.decode()
        except AttributeError:
            pass
        return f"CUresult {rc}"

    def _check(self, call: str, rc: int) -> None:
        if rc != 0:
            raise CudaDriverError(f"{call} failed: {self._error_name(rc)}")

    def _with_context(self, device_index: int, fn: Callable[[], Any]) -> Any:
        """Run fn with the device's primary context current (the one torch uses)."""
        lib = self.lib
        dev = ctypes.c_int()
        self._check("cuDeviceGet", lib.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(device_index)))
        ctx = ctypes.c_void_p()
        self._check("cuDevicePrimaryCtxRetain",
                    lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
        try:
            self._check("cuCtxPushCurrent", lib.cuCtxPushCurrent_v2(ctx))
            try:
                return fn()
            finally:
                lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        finally:
            lib.cuDevicePrimaryCtxRelease_v2(dev)

    def address_range(self, device_index: int, ptr: int) -> Tuple[int, int]:
        """(base, size) of the allocation holding device address ptr."""
        def run() -> Tuple[int, int]:
            base, size = ctypes.c_uint64(), ctypes.c_size_t()
            self._check("cuMemGetAddressRange",
                        self.lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                                         ctypes.c_uint64(ptr)))
            return int(base.value), int(size.value)
        with self._lock:
            return self._with_context(device_index, run)

    def ipc_handle(self, device_index: int, base: int) -> bytes:
        """cuIpcGetMemHandle of the allocation starting at base."""
        def run() -> bytes:
            handle = (ctypes.c_char * CUDA_IPC_HANDLE_BYTES)()
            rc = self.lib.cuIpcGetMemHandle(handle, ctypes.c_uint64(base))
            if rc != 0:
                raise CudaDriverError(
                    f"cuIpcGetMemHandle failed: {self._error_name(rc)} (legacy CUDA IPC needs "
                    "cudaMalloc'ed memory: no expandable segments, cudaMallocAsync or VMM pools)")
            return bytes(handle.raw)
        with self._lock:
            return self._with_context(device_index, run)

    def stream_wait_value64(self, stream: int, address: int, value: int) -> None:
        """cuStreamWaitValue64(stream, address, value, GEQ): the stream's later work waits
        (on the GPU) until the 8-byte word at `address` is >= value. The calling thread's
        current context must own the stream (as torch's streams on torch's thread)."""
        fn = self._wait_value64
        if fn is None:
            fn = getattr(self.lib, "cuStreamWaitValue64_v2", None) or self.lib.cuStreamWaitValue64
            fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint]
            fn.restype = ctypes.c_int
            self._wait_value64 = fn
        self._check("cuStreamWaitValue64", fn(stream, address, value, 0))  # 0 = GEQ

    def device_uuid(self, device_index: int) -> bytes:
        dev = ctypes.c_int()
        self._check("cuDeviceGet", self.lib.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(device_index)))
        raw = (ctypes.c_char * 16)()
        fn = getattr(self.lib, "cuDeviceGetUuid_v2", None) or self.lib.cuDeviceGetUuid
        self._check("cuDeviceGetUuid", fn(raw, dev))
        return bytes(raw.raw)


_driver_instance: Optional[_Driver] = None
_driver_lock = threading.Lock()


def _driver() -> _Driver:
    global _driver_instance
    with _driver_lock:
        if _driver_instance is None:
            _driver_instance = _Driver()
        return _driver_instance


def _storage_extent(t: Any) -> Tuple[int, int]:
    storage = t.untyped_storage()
    return int(storage.data_ptr()), int(storage.nbytes())


def export_with_driver(t: Any) -> IpcAllocation:
    """The cudaMalloc allocation holding tensor t: cuMemGetAddressRange + cuIpcGetMemHandle."""
    device_index = _device_of(t, "tensor")
    drv = _driver()
    base, size = drv.address_range(device_index, int(t.data_ptr()))
    return IpcAllocation(drv.ipc_handle(device_index, base), base, size, "cuda driver")


def normalize_torch_ipc_handle(handle: bytes) -> bytes:
    """The 64-byte cudaIpcMemHandle_t inside what torch's _share_cuda_ answers."""
    handle = bytes(handle)
    if len(handle) == CUDA_IPC_HANDLE_BYTES:
        return handle  # torch < 2.5: the raw handle
    if len(handle) == CUDA_IPC_HANDLE_BYTES + 2 and handle[1] == _SHAREABLE_CUDA_MALLOC:
        return handle[2:]  # version byte, type 'c', raw handle
    if len(handle) >= 2 and handle[1] == _SHAREABLE_EXPANDABLE_SEGMENT:
        raise ValueError("the KV cache lives in a PyTorch expandable segment, which legacy CUDA "
                         "IPC cannot export: unset expandable_segments in PYTORCH_CUDA_ALLOC_CONF")
    raise ValueError(f"unrecognized torch IPC handle ({len(handle)} bytes, "
                     f"starting {handle[:2].hex()})")


def _snapshot_segment_size(device_index: int, base: int) -> Optional[int]:
    import torch

    for seg in torch.cuda.memory_snapshot():
        if int(seg.get("device", device_index)) == device_index and int(seg.get("address", -1)) == base:
            return int(seg["total_size"])
    return None


def export_with_torch(t: Any) -> IpcAllocation:
    """The caching-allocator segment of tensor t via untyped_storage()._share_cuda_()."""
    device_index = _device_of(t, "tensor")
    storage = t.untyped_storage()
    info = storage._share_cuda_()  # (device, handle, size, offset_bytes, ref counter, ...)
    handle = normalize_torch_ipc_handle(info[1])
    base = int(storage.data_ptr()) - int(info[3])
    try:
        drv_base, size = _driver().address_range(device_index, base)
        if drv_base != base:
            raise ValueError(f"torch's segment base {base:#x} differs from the driver's "
                             f"allocation base {drv_base:#x}")
        source = "torch _share_cuda_ + cuda driver size"
    except CudaDriverError:
        size = _snapshot_segment_size(device_index, base)
        source = "torch _share_cuda_ + memory_snapshot size"
        if size is None:  # Lower bound: enough for the daemon's range checks.
            size = int(info[3]) + int(storage.nbytes())
            source = "torch _share_cuda_ + storage extent"
    return IpcAllocation(handle, base, size, source)


def _resolve_exporter(exporter: Union[str, Exporter]) -> Exporter:
    if callable(exporter):
        return exporter
    if exporter == "driver":
        return export_with_driver
    if exporter == "torch":
        return export_with_torch
    raise ValueError(f"exporter must be 'driver', 'torch' or a callable, got {exporter!r}")


# ---------------------------------------------------------------------- IPC events


class IpcEventPool:
    """A few interprocess CUDA events of one device, recorded round-robin.

    The engine records one after the forward pass that wrote the blocks it stores, on the
    stream that ran it, and passes the answer of record() as the store's wait_event. Reusing
    an event is safe: a re-record on the same stream only makes the daemon wait for later
    work, never for less.
    """

    def __init__(self, device_index: int, size: int = 4) -> None:
        if not 1 <= size <= 64:
            raise ValueError(f"an IPC event pool holds 1..64 events, got {size}")
        import torch

        self.device_index = int(device_index)
        with torch.cuda.device(self.device_index):
            self.events = [torch.cuda.Event(interprocess=True) for _ in range(size)]
            self.handles: List[bytes] = [bytes(e.ipc_handle()) for e in self.events]
        for h in self.handles:
            if len(h) != CUDA_IPC_HANDLE_BYTES:
                raise ValueError(f"torch answered a {len(h)}-byte IPC event handle")
        self._next = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.events)

    def record(self, stream: Any = None) -> int:
        """Record the next event on `stream` (default: the device's current stream).

        Returns the store's wait_event value: 1 + the event's index.
        """
        import torch

        with self._lock:
            index = self._next
            self._next = (index + 1) % len(self.events)
        with torch.cuda.device(self.device_index):
            self.events[index].record(stream)
        return index + 1


class LayerFlags:
    """One 8-byte word per layer in GPU memory, for layer-wise loads (sent with the
    registration as CudaKvMemory.layer_flags; layers are the pieces' distinct `layer`
    values, ascending: one word for a cross-layer cache).

    A layer-wise load (Session.submit_load(..., layer_flag_value=v)) makes the daemon write
    v into layer i's word once layer i's blocks landed, on its own copy stream; wait(i, v)
    makes an engine stream wait on the GPU until the word is >= v (no CPU wait, no ordering
    between the submit and the wait). Values only grow: next_value() per load, one load of
    the registration at a time.
    """

    def __init__(self, device_index: int, layers: Sequence[int],
                 exporter: Union[str, Exporter] = "driver") -> None:
        import torch

        self.layers = sorted(set(int(x) for x in layers))
        self.index = {layer: i for i, layer in enumerate(self.layers)}
        self.device_index = int(device_index)
        self.words = torch.zeros(len(self.layers), dtype=torch.int64,
                                 device=f"cuda:{self.device_index}")
        alloc = _resolve_exporter(exporter)(self.words)
        self.ptr = int(self.words.data_ptr())
        self.ipc_handle = alloc.handle
        self.offset = self.ptr - alloc.base
        self.allocation_bytes = alloc.size
        self._value = 0
        self._lock = threading.Lock()
        self._side: Any = None  # release()'s stream

    def __len__(self) -> int:
        return len(self.layers)

    def to_proto(self) -> Any:
        return pb.CudaLayerFlags(ipc_handle=self.ipc_handle, offset=self.offset,
                                 allocation_bytes=self.allocation_bytes)

    def next_value(self) -> int:
        """The value for the next layer-wise load (1, 2, ...; below 2**32)."""
        with self._lock:
            self._value += 1
            return self._value

    def wait(self, layer: int, value: int, stream: Any = None) -> None:
        """Make `stream` (default: the current stream) wait until the layer landed."""
        import torch

        s = stream or torch.cuda.current_stream()
        _driver().stream_wait_value64(int(s.cuda_stream), self.ptr + 8 * self.index[layer],
                                      int(value))

    def wait_all(self, value: int, stream: Any = None) -> None:
        """Make `stream` wait for every layer (when no per-layer hook will run)."""
        for layer in self.layers:
            self.wait(layer, value, stream)

    def release(self, value: int) -> None:
        """After a failed or lost load (e.g. the daemon died before writing every word):
        write `value` into every word from this process, on a stream of its own, so that
        streams waiting for it go on (the caller reports those blocks failed)."""
        import torch

        with torch.cuda.device(self.device_index):
            if self._side is None:
                self._side = torch.cuda.Stream()
            with torch.cuda.stream(self._side):
                self.words.clamp_(min=int(value))
