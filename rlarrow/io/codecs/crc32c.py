"""CRC-32C (Castagnoli), as TFRecord framing uses it, for many records at once with NumPy.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

A record's checksum is the CRC-32C of its bytes, "masked" (rotated and offset) so that a
checksum of checksums does not degenerate. :func:`crc32c_many` computes the CRCs of many
byte ranges of one buffer in a few vectorised passes: ranges are grouped by their length in
4-byte words and each group advances one word per pass through two 65,536-entry tables
(one for each 16-bit half of the register). Ranges that come alone take the scalar path,
which walks the same tables in Python, up to 32 KiB; a longer one (an image, a histogram, a
graph) is cut into 256-byte pieces whose CRCs are computed together and combined.

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
# 1 s vs 1 ms for 8 MiB of 1 MiB records, on the scalar path); such a record is now cut into
# pieces combined in NumPy (_crc32c_long: 1 MiB in 16 ms instead of 173 ms, 8 MiB in 52 ms).
# ``benchmarks/tfevents_crc.py`` repeats this measurement in ``make bench`` (RESULTS.md): both
# CRCs of 1M records, ours 0.36-0.43 s against 0.47-0.50 s for google-crc32c called per CRC.

from __future__ import annotations

import numpy as np

from rlarrow.core.errors import ArgumentError

__all__: list[str] = []

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


# Ranges that share their length with few others take the scalar path, one word per Python
# step (about 1 s per 8 MiB), up to _MEDIUM bytes. Longer ones (histograms, images, graphs)
# are cut into pieces of _PIECE bytes whose CRCs are computed together and combined: up to
# _LONG bytes all such ranges of a call at once (_crc32c_pieces), longer ones each alone in
# log2(pieces) steps (_crc32c_long). Measured on logs with a 25 KB histogram every 20 steps:
# 250 histograms took 0.25 s on the scalar path.
_MEDIUM = 1 << 12
_LONG = 1 << 17
_PIECE = 1 << 8


def _apply(cols: np.ndarray, regs: np.ndarray) -> np.ndarray:
    """The linear map whose images of the 32 unit registers are ``cols``, applied to ``regs``."""
    out = np.zeros(regs.shape, dtype=np.uint32)
    for j in range(32):
        out ^= np.where((regs >> np.uint32(j)) & np.uint32(1), cols[j], np.uint32(0)).astype(np.uint32)
    return out


# The register pushed through _PIECE zero bytes, as the images of the 32 unit registers.
_ZEROS_PIECE = _advance_zero_bytes(np.uint32(1) << np.arange(32, dtype=np.uint32), _PIECE)


def _byte_tables(cols: np.ndarray) -> np.ndarray:
    """The linear map with these unit images as 4 tables of 256, one per byte of the register."""
    values = np.arange(256, dtype=np.uint32)
    return np.stack([_apply(cols, values << np.uint32(8 * b)) for b in range(4)])


_ZEROS_PIECE_BYTES = _byte_tables(_ZEROS_PIECE)


def _crc32c_pieces(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, words: np.ndarray) -> np.ndarray:
    """The CRC-32C of several long ranges at once, from the CRCs of their pieces.

    Each range is a head of ``length % _PIECE`` bytes (or one piece) and pieces of ``_PIECE``
    bytes (see :func:`_crc32c_long` for why pieces combine). All heads' and pieces' CRCs come
    from two vectorised calls; then the ranges, aligned on their last piece, take one piece
    per step together: the register through ``_PIECE`` zero bytes (four table lookups),
    XOR the piece's raw register from 0.
    """
    ones = np.uint32(0xFFFFFFFF)
    head = lengths % _PIECE
    head[head == 0] = _PIECE
    k = (lengths - head) // _PIECE
    owner = np.repeat(np.arange(len(starts)), k)
    first = np.concatenate([[0], np.cumsum(k)[:-1]])
    j = np.arange(len(owner)) - first[owner]  # each piece's place in its range
    piece_starts = starts[owner] + head[owner] + _PIECE * j
    piece_crcs = crc32c_many(buf, piece_starts, np.full(len(owner), _PIECE), words)
    through_zeros = _apply(_ZEROS_PIECE, np.array([0xFFFFFFFF], dtype=np.uint32))[0]
    raws = piece_crcs ^ ones ^ through_zeros
    steps = int(k.max()) if len(k) else 0
    grid = np.zeros((len(starts), steps), dtype=np.uint32)
    grid[owner, steps - k[owner] + j] = raws
    reg = crc32c_many(buf, starts, head, words) ^ ones  # the raw registers after the heads
    for c in range(steps):
        reg = np.where(c >= steps - k, _through(_ZEROS_PIECE_BYTES, reg) ^ grid[:, c], reg)
    out: np.ndarray = reg ^ ones
    return out


def _crc32c_long(buf: np.ndarray, start: int, length: int, words: np.ndarray) -> int:
    """The CRC-32C of one long range, from the CRCs of its pieces.

    The register's update is linear over GF(2) in the register and the data, so the raw
    register after A then B (no final XOR) is the register after A pushed through ``len(B)``
    zero bytes, XOR B's raw register from 0. The range is cut into a head of
    ``length % _PIECE`` bytes (or one piece) and pieces of ``_PIECE`` bytes; all their CRCs
    come from one vectorised :func:`crc32c_many`, and pairs of equal length combine level by
    level (leading zero pieces, whose raw register is 0, make the count a power of two).
    """
    head = length % _PIECE or _PIECE
    k = (length - head) // _PIECE  # pieces after the head
    piece_starts = start + head + _PIECE * np.arange(k, dtype=np.int64)
    crcs = crc32c_many(buf, np.concatenate([[start], piece_starts]),
                       np.concatenate([[head], np.full(k, _PIECE, dtype=np.int64)]), words)
    ones = np.uint32(0xFFFFFFFF)
    reg = int(crcs[0] ^ ones)  # the raw register after the head, from the initial 0xFFFFFFFF
    if not k:
        return reg ^ 0xFFFFFFFF
    # raw registers of the pieces from 0: crc ^ 0xFFFFFFFF ^ (0xFFFFFFFF through a piece of zeros)
    raws = crcs[1:] ^ ones ^ _apply(_ZEROS_PIECE, np.array([0xFFFFFFFF], dtype=np.uint32))[0]
    size = 1 << max(0, (k - 1).bit_length())
    level = np.concatenate([np.zeros(size - k, dtype=np.uint32), raws.astype(np.uint32)])
    i = 0
    while len(level) > 1:
        level = _through(_power(i), level[0::2]) ^ level[1::2]
        i += 1
    # the head's register through the k pieces' bytes, XOR the pieces' combined raw register
    moved = np.array([reg], dtype=np.uint32)
    for i in range(k.bit_length()):
        if (k >> i) & 1:
            moved = _through(_power(i), moved)
    return int(moved[0] ^ level[0]) ^ 0xFFFFFFFF


# The maps through _PIECE * 2^i zero bytes, as byte tables (_byte_tables), made once as needed.
_POWERS: list[tuple[np.ndarray, np.ndarray]] = []  # (unit images, byte tables)


def _power(i: int) -> np.ndarray:
    """The byte tables of the map through ``_PIECE * 2**i`` zero bytes."""
    while len(_POWERS) <= i:
        cols = _ZEROS_PIECE if not _POWERS else _apply(_POWERS[-1][0], _POWERS[-1][0])
        _POWERS.append((cols, _byte_tables(cols)))
    return _POWERS[i][1]


def _through(tables: np.ndarray, reg: np.ndarray) -> np.ndarray:
    """Registers through a linear map given as byte tables: four lookups."""
    out: np.ndarray = tables[0][reg & 0xFF] ^ tables[1][(reg >> 8) & 0xFF] ^ tables[2][(reg >> 16) & 0xFF] \
        ^ tables[3][reg >> 24]
    return out


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
    medium: list[int] = []  # ranges alone at their length, of _MEDIUM bytes up to _LONG: together
    for group in np.split(order, bounds):
        w = int(nwords[group[0]])
        short = lengths[group] < 4
        if short.any() or (len(group) < _FEW and w >= 64):
            for i in group.tolist():
                s, n = int(starts[i]), int(lengths[i])
                if n >= _LONG:
                    out[i] = _crc32c_long(buf, s, n, words)
                elif n >= _MEDIUM:
                    medium.append(i)
                else:
                    out[i] = crc32c(buf[s: s + n].tobytes())
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

    if medium:
        out[medium] = _crc32c_pieces(buf, starts[medium], lengths[medium], words)
    if threads > 1 and len(jobs) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(run, jobs))
    else:
        for job in jobs:
            run(job)
    return out
