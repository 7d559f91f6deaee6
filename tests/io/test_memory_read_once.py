"""A memory export is read once per import (issue 37): episodes unroll from what was read.

``import_memory(..., episodes=True)`` (``rlarrow convert --episodes``) unrolls the snapshots it
has just read from their files, not the store's copy it has just written: the episodes and
steps must be exactly those that unrolling the store's copy gives (:func:`unroll_store`), and
the input file is opened a small fixed number of times, traced with strace (an ``.npz`` was opened
11 times, a ``.pt`` 7 times; a ``.pt`` is now opened once).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import rlarrow
from rlarrow.io.memory.csv import write_csv
from rlarrow.io.memory.importer import import_memory
from rlarrow.io.memory.npz import write_npz
from rlarrow.io.memory.snapshot import MemorySnapshot
from rlarrow.io.memory.unroll import unroll_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hostile import needs_strace, traced  # noqa: E402
from test_unroll_series import play, skrl_name  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None


def _write(fmt: str, tensors: dict[str, np.ndarray], path: Path) -> Path:
    if fmt == "pt":
        from rlarrow.io.memory.pt import write_pt

        return write_pt(MemorySnapshot(tensors), path)
    if fmt == "csv":
        return write_csv(MemorySnapshot(tensors), path)
    return write_npz(tensors, path)


def _tables(store: Path) -> tuple[pa.Table, pa.Table]:
    st = rlarrow.Store.open(store, readonly=True)
    return (st.read("episodes").sort_by([("episode_id", "ascending")]),
            st.read("steps").sort_by([("episode_id", "ascending"), ("step", "ascending")]))


@pytest.mark.parametrize("fmt", [
    "npz", "csv",
    pytest.param("pt", marks=pytest.mark.skipif(not HAVE_TORCH, reason="writing a .pt export needs torch: "
                                                "pip install 'rlarrow[torch]'"))])
def test_episodes_unrolled_from_what_was_read_equal_the_stores_copy_unrolled(tmp_path, fmt):
    played = play(exports=3, memory_size=12)
    files = [_write(fmt, tensors, tmp_path / "memories" / f"{skrl_name(i)}.{fmt}")
             for i, tensors in enumerate(played.exports)]
    # a lone export beside the series (another memory): a series of its own
    files.append(_write(fmt, play(exports=1, memory_size=9, seed=3).exports[0],
                        tmp_path / "memories" / f"{skrl_name(0, '0x1')}.{fmt}"))
    csv = {"num_envs": 3} if fmt == "csv" else {}
    read = import_memory(files, tmp_path / "read", run_id="r", episodes=True, progress=False, **csv)
    import_memory(files, tmp_path / "stored", run_id="r", progress=False, **csv)
    with warnings.catch_warnings():  # (the import said these assumptions in its report)
        warnings.simplefilter("ignore", rlarrow.AssumptionWarning)
        from_store = unroll_store(tmp_path / "stored", run_id="r",
                                  formats={i: fmt for i in range(len(files))})
    assert (read.episodes, read.steps) == from_store and read.episodes > 20
    got, want = _tables(tmp_path / "read"), _tables(tmp_path / "stored")
    for table_got, table_want in zip(got, want, strict=True):
        assert table_got.equals(table_want)  # values, nulls, types, metadata: row for row


def test_an_import_into_a_run_with_episodes_numbers_the_new_ones_after_them(tmp_path):
    played = play(exports=2, memory_size=10)
    files = [write_npz(t, tmp_path / "memories" / f"{skrl_name(i)}.npz")
             for i, t in enumerate(played.exports)]
    first = import_memory(files[:1], tmp_path / "s", run_id="r", episodes=True, progress=False)
    second = import_memory(files[1:], tmp_path / "s", run_id="r", episodes=True, progress=False)
    ids = rlarrow.Store.open(tmp_path / "s", readonly=True).read("episodes").column("episode_id").to_pylist()
    assert sorted(ids) == list(range(first.episodes + second.episodes))


@needs_strace
@pytest.mark.parametrize(("fmt", "opens"), [
    ("npz", 2),  # its hash, then one open for the zip directory, the checksums and every array
    # once: the hash's pass maps it, checks its CRC-32s, and the tensors are views of that map
    pytest.param("pt", 1, marks=pytest.mark.skipif(not HAVE_TORCH, reason="writing a .pt export needs torch: "
                                                   "pip install 'rlarrow[torch]'")),
])
def test_convert_episodes_opens_the_input_a_fixed_few_times(tmp_path, fmt, opens):
    played = play(exports=1, memory_size=12)
    path = _write(fmt, played.exports[0], tmp_path / "in" / f"{skrl_name(0)}.{fmt}")
    done, touched = traced(["convert", str(path), "-o", str(tmp_path / "s"), "--episodes"],
                           canary=path, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    opened = [line for line in touched if "open" in line.split("(", 1)[0] and "= -1" not in line]
    assert len(opened) == opens, "\n".join(opened)
    assert rlarrow.Store.open(tmp_path / "s", readonly=True).row_count("episodes") > 0


@pytest.mark.parametrize("fmt", [
    "npz",
    pytest.param("pt", marks=pytest.mark.skipif(not HAVE_TORCH, reason="writing a .pt export needs torch: "
                                                "pip install 'rlarrow[torch]'"))])
def test_the_hash_pass_checks_the_crcs_and_a_file_changed_after_it_is_checked_again(tmp_path, fmt):
    from rlarrow.io.importing import content_hash
    from rlarrow.io.memory.importer import read_memory
    from rlarrow.io.memory.snapshot import crc_record, digest_export, zip_members

    path = _write(fmt, play(exports=1, memory_size=40).exports[0], tmp_path / f"m.{fmt}")
    assert digest_export(path) == content_hash(path)  # the sources table's sha256, unchanged
    for other in (path, tmp_path / "not-a-zip.csv", tmp_path / "empty"):  # zip or not, in a record or not
        if other != path:
            other.write_bytes(b"0.5,1\n" * 100 if other.suffix else b"")
        with crc_record():
            want = hashlib.sha256(other.read_bytes()).hexdigest(), other.stat().st_size
            assert digest_export(other) == want
    biggest = max(zip_members(path), key=lambda m: m.size)
    with crc_record():
        assert digest_export(path) == content_hash(path)
        read_memory(path)  # checked in the hash's pass: passes
        with open(path, "r+b") as fh:  # one bit of a tensor flipped after the hash, the size the same
            fh.seek(biggest.start + biggest.size // 2)
            byte = fh.read(1)[0]
            fh.seek(-1, 1)
            fh.write(bytes([byte ^ 0x10]))
        with pytest.raises(rlarrow.CorruptFileError, match=r"CRC-32"):
            read_memory(path)
    with pytest.raises(rlarrow.CorruptFileError, match=r"CRC-32"):  # and without a record
        read_memory(path)
    with crc_record():  # damaged before the hash: the hash says nothing, the read says what
        digest_export(path)
        with pytest.raises(rlarrow.CorruptFileError, match=repr(biggest.name)[1:-1]):
            read_memory(path)


@pytest.mark.skipif(not HAVE_TORCH, reason="writing a .pt export needs torch: pip install 'rlarrow[torch]'")
def test_an_export_hashed_in_the_record_is_not_read_again_for_its_crcs(tmp_path, monkeypatch):
    import zlib

    import rlarrow.io.memory.snapshot as snapshot
    from rlarrow.io.memory.pt import open_pt

    path = _write("pt", play(exports=1, memory_size=40).exports[0], tmp_path / "m.pt")
    checked: list[int] = []

    class Counting:  # zlib as the snapshot module calls it, counting the bytes each CRC-32 reads
        @staticmethod
        def crc32(data: bytes, value: int = 0) -> int:
            checked.append(len(data))
            return zlib.crc32(data, value)

    monkeypatch.setattr(snapshot, "zlib", Counting)
    with snapshot.crc_record():
        snapshot.digest_export(path)
        in_hash = sum(checked)
        _, verify = open_pt(path, mmap=True)
        verify()
    every = sum(m.size for m in snapshot.zip_members(path) if m.stored)
    assert sum(checked) == in_hash == every > 0  # all in the hash's pass, none again in the read
    checked.clear()
    _, verify = open_pt(path, mmap=True)  # without the record: every member checked by the reader
    verify()
    assert sum(checked) == every
