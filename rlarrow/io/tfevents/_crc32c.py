"""CRC-32C (Castagnoli), as TFRecord framing uses it, for many records at once with NumPy.

A record's checksum is the CRC-32C of its bytes, "masked" (rotated and offset) so that a
checksum of checksums does not degenerate. :func:`crc32c_many` computes the CRCs of many
byte ranges of one buffer in a few vectorised passes: ranges are grouped by their length in
4-byte words and each group advances one word per pass through two 65,536-entry tables
(one for each 16-bit half of the register). Long ranges that come alone (a histogram, a
graph) take the scalar path, which walks the same tables in Python.

Example:
    >>> import numpy as np
    >>> buf = np.frombuffer(b"...123456789", np.uint8)
    >>> hex(int(crc32c_many(buf, np.array([3]), np.array([9]))[0]))
    '0xe3069283'
    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
"""

# Why our own CRC-32C, not a library. None of the core dependencies has one (pyarrow, NumPy,
# DuckDB and Polars expose no CRC-32C), and the packages that do (``crc32c`` 2.9,
# ``google-crc32c`` 1.9, both hardware-accelerated C) checksum one buffer per Python call.
# Measured (one process, 2 cores, a loaded machine; figures vary by about 2x between runs):
# - one 64 MiB buffer: crc32c 4.6-16 ms, google-crc32c 5-9 ms; ours 18-30 s on the scalar path
#   (:func:`crc32c`) and about 0.2-0.4 s per MiB as a single range of :func:`crc32c_many`;
# - the reader's actual work, 72 MiB of 1,000,000 scalar event records (59-byte payloads),
#   both CRCs of every record: ours (:func:`crc32c_many`, 2 threads) 0.32-0.78 s; a Python loop
#   calling crc32c 0.89-1.0 s, google-crc32c 0.91-0.94 s.
# So ours is kept: it is as fast or faster on the many small records of scalar files, and needs
# no new dependency. A library is far faster on long records (images, histograms, graphs:
# 1 s vs 1 ms for 8 MiB of 1 MiB records), which the reader checks but then skips; using
# google-crc32c for long ranges when it is installed would be the fix if such files matter.
# ``benchmarks/tfevents_crc.py`` repeats this measurement in ``make bench`` (RESULTS.md): both
# CRCs of 1M records, ours 0.43 s against 0.50 s for google-crc32c called per CRC.

from __future__ import annotations

import numpy as np

from rlarrow.core.errors import ArgumentError

__all__ = ["crc32c", "crc32c_many", "mask", "unaligned"]

_POLY = 0x82F63B78


def _byte_table() -> np.ndarray:
    reg = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        reg = np.where(reg & 1, (reg >> 1) ^ np.uint32(_POLY), reg >> 1).astype(np.uint32)
    return reg


_T8 = _byte_table()


def _advance_zero_bytes(reg: np.ndarray, n: int) -> np.ndarray:
    for _ in range(n):
        reg = _T8[reg & 0xFF] ^ (reg >> 8)
    return reg


# A 32-bit register XORed with the next word, then pushed through four bytes, is a linear map
# of the register: split it into 16-bit halves, one table each.
_LO = _advance_zero_bytes(np.arange(65536, dtype=np.uint32), 4)
_HI = _advance_zero_bytes(np.arange(65536, dtype=np.uint32) << 16, 4)
_T8_LIST = _T8.tolist()
_LO_LIST = _LO.tolist()
_HI_LIST = _HI.tolist()

# Ranges at least this long that share their length with fewer than _FEW others use the
# scalar path: one Python step per word beats one NumPy pass per word on tiny groups.
_FEW = 16


def mask(crc: np.ndarray | int) -> np.ndarray | int:
    """TFRecord's masked CRC: rotate right by 15 bits and add 0xa282ead8 (mod 2^32)."""
    if isinstance(crc, np.ndarray):
        c = crc.astype(np.uint32)
        return ((c >> np.uint32(15)) | (c << np.uint32(17))) + np.uint32(0xA282EAD8)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """The CRC-32C of ``data`` (scalar path)."""
    mv = memoryview(data).cast("B")
    n4 = len(mv) // 4
    reg = 0xFFFFFFFF
    lo, hi = _LO_LIST, _HI_LIST
    for w in mv[: n4 * 4].cast("I") if n4 else ():
        reg ^= w
        reg = lo[reg & 0xFFFF] ^ hi[reg >> 16]
    t8 = _T8_LIST
    for b in mv[n4 * 4:]:
        reg = t8[(reg ^ b) & 0xFF] ^ (reg >> 8)
    return reg ^ 0xFFFFFFFF


def unaligned(buf: np.ndarray, dtype: str) -> np.ndarray:
    """A view of ``buf`` (uint8) with one little-endian ``dtype`` value starting at every byte."""
    size = np.dtype(dtype).itemsize
    n = max(len(buf) - size + 1, 0)
    if not n:
        return np.zeros(0, dtype)
    return np.ndarray(shape=(n,), dtype=dtype, buffer=buf, offset=0, strides=(1,))


def crc32c_many(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                words: np.ndarray | None = None, threads: int = 1) -> np.ndarray:
    """CRC-32C of ``buf[starts[i] : starts[i] + lengths[i]]`` for every i (uint32 array).

    Ranges of 4 bytes or more must start at least 3 bytes into ``buf`` unless their length is
    a multiple of 4: each range is read in words aligned to its end, the few bytes before its
    start masked off. ``words`` may pass ``unaligned(buf, "<u4")`` when the caller has it;
    ``threads`` > 1 splits large groups across threads (NumPy releases the GIL).
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    out = np.empty(len(starts), dtype=np.uint32)
    if not len(starts):
        return out
    if words is None:
        words = unaligned(buf, "<u4")
    if ((starts < ((-lengths) & 3)) & (lengths >= 4)).any():
        raise ArgumentError("a range whose length is not a multiple of 4 must start at byte 3 or later")
    nwords = (lengths + 3) >> 2
    order = np.argsort(nwords, kind="stable")
    bounds = np.flatnonzero(np.diff(nwords[order])) + 1
    jobs: list[tuple[np.ndarray, int]] = []
    for group in np.split(order, bounds):
        w = int(nwords[group[0]])
        short = lengths[group] < 4
        if short.any() or (len(group) < _FEW and w >= 64):
            for i in group.tolist():
                s = int(starts[i])
                out[i] = crc32c(buf[s: s + int(lengths[i])].tobytes())
            continue
        step = -(-len(group) // threads) if len(group) >= 65536 else len(group)
        jobs += [(group[i: i + step], w) for i in range(0, len(group), step)]

    def run(job: tuple[np.ndarray, int]) -> None:
        group, w = job
        pad = (-lengths[group]) & 3
        base = starts[group] - pad
        shift = (8 * pad).astype(np.uint32)
        first = np.uint32(0xFFFFFFFF) << shift
        second = np.where(pad > 0, np.uint32(0xFFFFFFFF) >> (np.uint32(32) - shift), np.uint32(0))
        reg = (words[base] & first) ^ first
        reg = _LO[reg & 0xFFFF] ^ _HI[reg >> 16]
        for j in range(1, w):
            reg ^= words[base + 4 * j]
            if j == 1:
                reg ^= second.astype(np.uint32)
            reg = _LO[reg & 0xFFFF] ^ _HI[reg >> 16]
        out[group] = reg ^ np.uint32(0xFFFFFFFF)

    if threads > 1 and len(jobs) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(run, jobs))
    else:
        for job in jobs:
            run(job)
    return out
