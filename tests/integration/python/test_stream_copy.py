"""kvstrata.stream_copy: the native streaming-store copy of many pieces, and its fallback."""
from __future__ import annotations

import ctypes
import random

import pytest

from kvstrata import stream_copy

# Around the library's thresholds: below 16 KiB it is a plain memcpy, above it an aligned
# streaming body of 128-byte steps with an unaligned head and tail.
SIZES = [0, 1, 31, 127, 128, 16 * 1024 - 1, 16 * 1024, 16 * 1024 + 129, 1 << 20, (1 << 20) + 77]


def pieces_over(src: bytearray, dst: bytearray, rng: random.Random):
    """Non-overlapping pieces of SIZES at odd offsets of both buffers, in shuffled order."""
    s_base = ctypes.addressof((ctypes.c_char * len(src)).from_buffer(src))
    d_base = ctypes.addressof((ctypes.c_char * len(dst)).from_buffer(dst))
    pieces, s_off, d_off = [], 3, 5
    for n in SIZES:
        pieces.append((d_base + d_off, s_base + s_off, n))
        s_off += n + rng.randrange(1, 64)
        d_off += n + rng.randrange(1, 64)
    rng.shuffle(pieces)
    return pieces, s_base, d_base


def check(copy) -> None:
    rng = random.Random(7)
    total = sum(SIZES) + 64 * len(SIZES) + 16
    src = bytearray(rng.randbytes(total))
    dst = bytearray(total)
    pieces, s_base, d_base = pieces_over(src, dst, rng)
    copy(pieces)
    expected = bytearray(total)
    for d, s, n in pieces:
        expected[d - d_base:d - d_base + n] = src[s - s_base:s - s_base + n]
    assert dst == expected  # every piece exact, nothing written outside the pieces


def test_the_native_library_was_built_and_loaded() -> None:
    # scripts/setup_*.sh install the client with a C++ compiler present; a silent fallback
    # to memmove would cost the SGLang connector a third of its throughput.
    assert stream_copy.NATIVE, f"{stream_copy._LIBRARY} missing or not loadable"


def test_native_copy_is_exact_for_every_size_and_alignment() -> None:
    if not stream_copy.NATIVE:
        pytest.fail("native library not loaded")
    check(stream_copy.copy_pieces)


def test_memmove_fallback_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_copy, "_lib", None)
    check(stream_copy.copy_pieces)


def test_no_pieces_is_a_no_op() -> None:
    stream_copy.copy_pieces([])
    stream_copy.copy_pieces(iter(()))
