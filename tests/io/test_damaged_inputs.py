"""Damaged inputs are refused (or, on request, imported in the parts that are whole), never imported
with changed values.

Every input is a real file written by the peer tool (skrl's exports, torch.save, np.savez,
envlogger, Minari, TensorBoard's event format) that is then damaged the way disks, copies and
killed writers damage files: a flipped bit, a zeroed stretch, a garbled name, a huge length.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core.errors import CorruptFileError, RLArrowWarning, TruncatedInputWarning

SKRL = FIXTURES / "skrl"
PT = next((SKRL / "wrapped" / "memories").glob("*.pt"))
NPZ = next((SKRL / "wrapped" / "memories").glob("*.npz"))
CATCH = FIXTURES / "envlogger" / "catch"
MINARI = FIXTURES / "minari" / "cartpole"


def _member_data(path: Path, member: str) -> tuple[int, int]:
    """(offset, size) of a stored zip member's bytes in the file."""
    from rlarrow.io.memory.snapshot import zip_members

    found = {m.name: m for m in zip_members(path)}[member]
    return found.start, found.size


def _flip(path: Path, offset: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------- pt: every member's CRC-32


def _pt_members(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as zf:
        return zf.namelist()


@pytest.mark.parametrize("which", ["data/0", "data/1", "data/3", "data/5"])
def test_pt_with_a_changed_tensor_byte_is_refused_naming_the_member(tmp_path: Path, which: str) -> None:
    pytest.importorskip("torch")
    from rlarrow.io.memory.pt import read_pt

    member = next(m for m in _pt_members(PT) if m.endswith(which))
    start, size = _member_data(PT, member)
    for where in (start, start + size // 2, start + size - 1):
        bad = tmp_path / PT.name
        shutil.copyfile(PT, bad)
        _flip(bad, where, bit=3)
        with pytest.raises(CorruptFileError, match="CRC-32") as err:
            read_pt(bad)
        assert PT.name in str(err.value) and repr(member) in str(err.value)
        assert "export the memory again" in str(err.value)


def test_pt_with_a_damaged_pickle_is_reported_as_damage(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from rlarrow.io.memory.pt import read_pt

    member = next(m for m in _pt_members(PT) if m.endswith("data.pkl"))
    start, size = _member_data(PT, member)
    for where in range(start, start + size, 37):
        bad = tmp_path / PT.name
        shutil.copyfile(PT, bad)
        _flip(bad, where, bit=5)
        # checked before torch.load reads it: damage, not "refused: asks for code"
        with pytest.raises(CorruptFileError, match="data.pkl"):
            read_pt(bad)


def test_large_pt_storages_are_checked_while_converting_and_nothing_is_committed(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from rlarrow.io.memory.importer import import_memory
    from rlarrow.io.memory.pt import open_pt, write_pt

    rng = np.random.default_rng(0)
    path = write_pt({"states": rng.standard_normal((4096, 4, 32)).astype(np.float32),  # 2 MiB: deferred
                     "terminated": np.zeros((4096, 4, 1), bool)}, tmp_path / "m" / "memory.pt")
    member = max(_pt_members(path), key=lambda m: _member_data(path, m)[1])
    start, size = _member_data(path, member)
    assert size > 1 << 20
    _flip(path, start + size // 3, bit=7)
    snap, verify = open_pt(path, mmap=True)  # the storage is mapped, its check handed back
    assert snap.memory_size == 4096
    with pytest.raises(CorruptFileError, match="CRC-32") as err:
        verify()
    assert repr(member) in str(err.value)
    with pytest.raises(CorruptFileError, match="CRC-32"):
        import_memory([path], tmp_path / "s", progress=False)
    with rlarrow.Store.open(tmp_path / "s") as st:
        assert st.row_count("memory") == 0


def test_pt_and_npz_central_directory_damage_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from rlarrow.io.memory.importer import read_memory

    for src in (PT, NPZ):
        data = src.read_bytes()
        central = data.rfind(b"PK\x01\x02")  # the last member's central directory entry
        for field, size in ((16, 4), (42, 4)):  # its CRC-32, its local header's offset
            bad = tmp_path / src.name
            raw = bytearray(data)
            raw[central + field:central + field + size] = (0xDEADBEEF).to_bytes(4, "little")
            bad.write_bytes(bytes(raw))
            with pytest.raises(CorruptFileError) as err:
                read_memory(bad)
            assert src.name in str(err.value)


def _swallow_last_entry(data: bytes) -> bytes:
    """The zip with its next-to-last directory entry's comment length covering the last entry."""
    entries = []
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        entries.append(at)
        at = data.find(b"PK\x01\x02", at + 4)
    second, last = entries[-2], entries[-1]
    name, extra, comment = struct.unpack_from("<3H", data, last + 28)
    grown = struct.unpack_from("<H", data, second + 32)[0] + 46 + name + extra + comment
    return data[:second + 32] + struct.pack("<H", grown) + data[second + 34:]


def test_zip_directory_entry_swallowing_the_next_is_refused(tmp_path: Path) -> None:
    # zipfile reads the directory by its byte size: the last tensor would vanish without a word
    pytest.importorskip("torch")
    from rlarrow.io.memory.importer import read_memory

    for src in (PT, NPZ):
        bad = tmp_path / src.name
        bad.write_bytes(_swallow_last_entry(src.read_bytes()))
        with zipfile.ZipFile(bad) as zf:
            assert len(zf.infolist()) == len(_pt_members(src)) - 1
        with pytest.raises(CorruptFileError, match="end record lists"):
            read_memory(bad)


# ---------------------------------------------------------------- npz: member names


def _rename_in_central_directory(path: Path, old: bytes, new: bytes) -> None:
    data = bytearray(path.read_bytes())
    central = data.index(b"PK\x01\x02")
    at = data.index(old, central)
    data[at:at + len(old)] = new
    path.write_bytes(bytes(data))


def test_npz_member_name_damaged_in_the_directory_is_refused(tmp_path: Path) -> None:
    from rlarrow.io.memory.npz import read_npz

    for garbled in (b"st\x01tes.npy", b"stbtes.npy", b"states.npz", b"states\xe9npy"):
        bad = tmp_path / NPZ.name
        shutil.copyfile(NPZ, bad)
        _rename_in_central_directory(bad, b"states.npy", garbled)
        with pytest.raises(CorruptFileError, match="member") as err:
            read_npz(bad)
        assert NPZ.name in str(err.value)


@pytest.mark.parametrize("name", ["st\x01tes.npy", "states", "states.txt", " states.npy", "a/b.npy", ".npy"])
def test_npz_members_must_be_tensor_names(tmp_path: Path, name: str) -> None:
    from rlarrow.io.memory.npz import read_npz

    path = tmp_path / "m.npz"
    with zipfile.ZipFile(path, "w") as zf:  # what np.savez writes, under another member name
        with zf.open(name, "w") as fh:
            np.lib.format.write_array(fh, np.zeros((4, 2, 3), np.float32))
        with zf.open("actions.npy", "w") as fh:
            np.lib.format.write_array(fh, np.zeros((4, 2, 1), np.float32))
    with pytest.raises(CorruptFileError, match=r"cannot name a tensor") as err:
        read_npz(path)
    assert repr(name) in str(err.value)


def test_npz_with_valid_names_still_imports(tmp_path: Path) -> None:
    from rlarrow.io.memory.npz import read_npz, write_npz

    arrays = {"next_states": np.ones((4, 2, 3), np.float32), "log_prob": np.zeros((4, 2, 1))}
    snap = read_npz(write_npz(arrays, tmp_path / "m.npz"))
    assert sorted(snap.tensors) == ["log_prob", "next_states"]


# ---------------------------------------------------------------- tfevents: huge length fields


def _event_file(tmp_path: Path) -> Path:
    from rlarrow.io.tfevents import write_tfevents

    table = rlarrow.core.schema.build("scalars", {
        "run_id": "r", "scope": "train", "tag": ["train/loss"] * 5, "step": np.arange(5),
        "value": np.arange(5.0), "wall_time": np.arange(5.0)})
    write_tfevents(table, tmp_path / "tb")
    return next((tmp_path / "tb").rglob("*tfevents*"))


def _header(length: int, *, valid_crc: bool) -> bytes:
    from rlarrow.io.codecs.crc32c import crc32c, mask

    head = struct.pack("<Q", length)
    crc = mask(crc32c(head)) if valid_crc else mask(crc32c(head)) ^ 1
    return head + struct.pack("<I", crc)


@pytest.mark.parametrize("length", [1 << 40, 1 << 62, (1 << 64) - 1])
def test_tfevents_huge_length_with_a_valid_crc_reads_as_an_incomplete_last_record(
        tmp_path: Path, length: int) -> None:
    from rlarrow.io.tfevents import TfeventsReader, import_tfevents, read_tfevents

    path = _event_file(tmp_path)
    original = path.read_bytes()
    path.write_bytes(original + _header(length, valid_crc=True) + b"\x00" * 100)
    with pytest.warns(TruncatedInputWarning, match=f"its length field says {length} bytes"):
        table = read_tfevents(path)
    assert table.column("value").to_pylist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    # a small chunk: the record is met mid-file, where the reader asks for more bytes
    reader = TfeventsReader(path, chunk_bytes=64)
    with pytest.warns(TruncatedInputWarning):
        assert reader.read_all().num_rows == 5
    with pytest.warns(TruncatedInputWarning):
        report = import_tfevents(path, tmp_path / "s", progress=False)
    assert report.scalars == 5 and report.truncated == [str(path)]


@pytest.mark.parametrize("length", [1 << 40, 1 << 62, (1 << 64) - 1])
def test_tfevents_huge_length_with_a_bad_crc_is_corrupt(tmp_path: Path, length: int) -> None:
    from rlarrow.io.tfevents import read_tfevents

    path = _event_file(tmp_path)
    original = path.read_bytes()
    for damaged in (original + _header(length, valid_crc=False) + b"\x00" * 100,
                    original[:40] + _header(length, valid_crc=False) + original[40:]):
        path.write_bytes(damaged)
        with pytest.raises(CorruptFileError, match="length fails its checksum"):
            read_tfevents(path)


# ---------------------------------------------------------------- envlogger: cross-checks


def _envlogger_loads() -> bool:
    try:
        from rlarrow.io.envlogger import load

        load()
    except ImportError:
        return False
    return True


needs_envlogger = pytest.mark.skipif(
    not _envlogger_loads(), reason="needs envlogger 1.2 (test-only peer): pip install 'envlogger<1.3'")


def _shard(directory: Path) -> Path:
    return next(p for p in directory.iterdir() if p.is_dir())


def _zero(path: Path, start: int, count: int) -> None:
    data = bytearray(path.read_bytes())
    data[start:start + count] = bytes(len(data[start:start + count]))
    path.write_bytes(bytes(data))


def _rows(store: Path, table: str) -> list[dict[str, object]]:
    """The table's rows, ordered, with JSON metadata parsed (envlogger's dicts come in any key order)."""
    with rlarrow.Store.open(store) as st:
        rows = st.read(table).drop_columns(["run_id"]).to_pylist()
    for row in rows:
        for key in ("metadata", "metadata_types"):
            if isinstance(row.get(key), str):
                row[key] = json.loads(row[key])
    return sorted(rows, key=lambda r: (r["episode_id"], r.get("step", 0)))


@pytest.fixture
def catch_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "catch"
    shutil.copytree(CATCH, dest)
    return dest


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@needs_envlogger
def test_envlogger_lost_episode_index_is_refused_not_imported_empty(catch_copy: Path, tmp_path: Path) -> None:
    from rlarrow.io.envlogger import import_envlogger

    # the index's first chunk: envlogger's reader stops there quietly and finds no episode
    _zero(_shard(catch_copy) / "episode_index.riegeli", 100, 40)
    with pytest.raises(CorruptFileError, match="in no episode of the episode index") as err:
        import_envlogger(catch_copy, tmp_path / "s", progress=False)
    assert "skip_corrupt=True" in str(err.value)
    assert not (tmp_path / "s").exists()  # refused before a store was made


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@needs_envlogger
def test_envlogger_lost_episode_metadata_is_refused_or_skipped(catch_copy: Path, tmp_path: Path) -> None:
    from rlarrow.io.envlogger import import_envlogger

    whole = import_envlogger(CATCH, tmp_path / "whole", progress=False)
    assert whole.skipped == [] and (whole.episodes, whole.steps) == (20, 200)
    meta = _shard(catch_copy) / "episode_metadata.riegeli"
    _zero(meta, meta.stat().st_size - 60, 20)  # the last chunk: the last episode's metadata
    with pytest.raises(CorruptFileError, match="metadata.riegeli holds 20 records, envlogger read 19"):
        import_envlogger(catch_copy, tmp_path / "strict", progress=False)
    with pytest.warns(RLArrowWarning, match="skipped 1 damaged episodes, 10 steps"):
        report = import_envlogger(catch_copy, tmp_path / "skip", progress=False, skip_corrupt=True)
    assert (report.episodes, report.steps, report.skipped_episodes, report.skipped_steps) == (19, 190, 1, 10)
    assert any(line.startswith("episode 19 ") for line in report.skipped)
    assert "skipped as damaged" in str(report)
    # what was imported is exactly the undamaged import's episodes 0..18
    for table in ("steps", "episodes"):
        want = [r for r in _rows(tmp_path / "whole", table) if r["episode_id"] != 19]
        assert _rows(tmp_path / "skip", table) == want


@pytest.mark.parametrize("name", ["episode_metadata.riegeli", "episode_index.riegeli",
                                  "step_offsets.riegeli"])
@needs_envlogger
def test_envlogger_emptied_file_is_refused(catch_copy: Path, tmp_path: Path, name: str) -> None:
    """An emptied index file read as 'no records' imported every episode without its metadata."""
    from rlarrow.io.envlogger import import_envlogger

    (_shard(catch_copy) / name).write_bytes(b"")
    with pytest.raises(CorruptFileError, match=f"{name}.*(is empty|damaged|does not reach)"):
        import_envlogger(catch_copy, tmp_path / "strict", progress=False)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@needs_envlogger
def test_envlogger_merged_episodes_are_refused_or_skipped(catch_copy: Path, tmp_path: Path) -> None:
    from rlarrow.io.envlogger import import_envlogger

    import_envlogger(CATCH, tmp_path / "whole", progress=False)
    index = _shard(catch_copy) / "episode_index.riegeli"
    _zero(index, index.stat().st_size - 40, 20)  # the last index chunk: episodes 18 and 19 merge
    with pytest.raises(CorruptFileError):
        import_envlogger(catch_copy, tmp_path / "strict", progress=False)
    with pytest.warns(RLArrowWarning):
        report = import_envlogger(catch_copy, tmp_path / "skip", progress=False, skip_corrupt=True)
    assert report.episodes == 18 and report.skipped_steps == 20
    assert any("FIRST timestep in the middle" in line for line in report.skipped)
    for table in ("steps", "episodes"):
        want = [r for r in _rows(tmp_path / "whole", table) if r["episode_id"] < 18]
        assert _rows(tmp_path / "skip", table) == want


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@needs_envlogger
def test_envlogger_shards_are_checked_one_by_one(catch_copy: Path, tmp_path: Path) -> None:
    from rlarrow.io.envlogger import import_envlogger

    first = _shard(catch_copy)
    second = catch_copy / (first.name[:-1] + "9")  # a later timestamp: read after the first
    shutil.copytree(first, second)
    report = import_envlogger(catch_copy, tmp_path / "both", progress=False)
    assert (report.episodes, report.steps) == (40, 400)
    assert [r["episode_id"] for r in _rows(tmp_path / "both", "episodes")] == list(range(40))
    _zero(second / "steps.riegeli", 900, 8)  # the second shard's steps: all in one damaged chunk
    with pytest.raises(CorruptFileError, match="shard"):
        import_envlogger(catch_copy, tmp_path / "strict", progress=False)
    with pytest.warns(RLArrowWarning):
        report = import_envlogger(catch_copy, tmp_path / "skip", progress=False, skip_corrupt=True)
    assert (report.episodes, report.skipped_episodes, report.skipped_steps) == (20, 20, 200)
    assert _rows(tmp_path / "skip", "steps") == [r for r in _rows(tmp_path / "both", "steps")
                                                 if r["episode_id"] < 20]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("name", ["episode_index.riegeli", "step_offsets.riegeli"])
@needs_envlogger
def test_skip_corrupt_counts_a_lost_shard_and_keeps_the_others_ids(catch_copy: Path, tmp_path: Path,
                                                                   name: str) -> None:
    from rlarrow.io.envlogger import import_envlogger

    first = _shard(catch_copy)
    second = catch_copy / (first.name[:-1] + "9")  # read after the first: episodes 20..39
    shutil.copytree(first, second)
    import_envlogger(catch_copy, tmp_path / "both", progress=False)
    (first / name).write_bytes(b"")  # envlogger then finds no episode in the first shard at all
    out = subprocess.run([sys.executable, "-m", "rlarrow", "convert", str(catch_copy), "-o",
                          str(tmp_path / "skip"), "--skip-corrupt"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "skipped as damaged: 20 episodes, 200 steps, in " in out.stdout
    assert f"{first.name}/{name}" in out.stdout
    with pytest.warns(RLArrowWarning, match="skipped 20 damaged episodes, 200 steps"):
        report = import_envlogger(catch_copy, tmp_path / "api", progress=False, skip_corrupt=True)
    assert (report.episodes, report.skipped_episodes, report.skipped_steps) == (20, 20, 200)
    assert f"{first.name}/{name}" in report.damaged_files
    # the survivors keep their ids in the whole directory (20..39), not renumbered from 0
    for store in ("skip", "api"):
        for table in ("steps", "episodes"):
            assert _rows(tmp_path / store, table) == [r for r in _rows(tmp_path / "both", table)
                                                      if r["episode_id"] >= 20]


def test_riegeli_record_count_reads_chunk_headers_and_caps_lengths(tmp_path: Path) -> None:
    from rlarrow.io.envlogger import riegeli_record_count

    shard = _shard(CATCH)
    assert riegeli_record_count(shard / "steps.riegeli") == 200
    assert riegeli_record_count(shard / "episode_metadata.riegeli") == 20
    original = (shard / "steps.riegeli").read_bytes()
    # the second chunk's header starts at byte 64 (after the signature chunk); its data size at 72
    for size in (1 << 40, 1 << 62, (1 << 64) - 1):
        bad = tmp_path / "steps.riegeli"
        bad.write_bytes(original[:72] + struct.pack("<Q", size) + original[80:])
        with pytest.raises(CorruptFileError, match=f"claims {size} bytes.*past the end of the file"):
            riegeli_record_count(bad)
    bad.write_bytes(original[:len(original) // 2])
    with pytest.raises(CorruptFileError, match="past the end of the file"):
        riegeli_record_count(bad)
    bad.write_bytes(b"not riegeli" * 10)
    with pytest.raises(CorruptFileError, match="not a Riegeli"):
        riegeli_record_count(bad)


# ---------------------------------------------------------------- Minari: damage is an rlarrow error


def _minari_copy(tmp_path: Path, backend: str) -> Path:
    dest = tmp_path / f"{backend}-v0"
    shutil.copytree(MINARI / f"{backend}-v0", dest)
    return dest


@pytest.mark.parametrize("backend", ["arrow", "parquet"])
def test_minari_garbled_column_name_is_corrupt_not_a_unicode_error(tmp_path: Path, backend: str) -> None:
    from rlarrow.io.minari import import_minari

    dataset = _minari_copy(tmp_path, backend)
    part = dataset / "data" / "3" / f"part-0.{backend}"
    data = part.read_bytes()
    assert b"truncations" in data
    part.write_bytes(data.replace(b"truncations", b"\xe8runcations"))
    with pytest.raises(CorruptFileError) as err:
        import_minari(dataset, tmp_path / "s", progress=False)
    assert part.name in str(err.value) or "data/3" in str(err.value).replace("\\", "/")


def test_minari_damaged_arrow_buffers_are_corrupt_not_pyarrow_errors(tmp_path: Path) -> None:
    from rlarrow.core.errors import RLArrowError
    from rlarrow.io.minari import import_minari

    source = MINARI / "arrow-v0" / "data" / "5" / "part-0.arrow"
    size = source.stat().st_size
    for where in range(0, size, max(1, size // 150)):
        dataset = tmp_path / f"d{where}"
        shutil.copytree(MINARI / "arrow-v0", dataset)
        _flip(dataset / "data" / "5" / "part-0.arrow", where, bit=6)
        try:
            import_minari(dataset, tmp_path / f"s{where}", progress=False)
        except RLArrowError:
            pass  # anything else (pyarrow's own errors) fails the test


@pytest.mark.parametrize(("key", "value", "match"), [
    ("total_steps", 17, "says the episode has 17 steps"),
    ("rewards_sum", 19.0, "rewards sum to 19.0"),
])
def test_minari_episode_metadata_is_cross_checked(tmp_path: Path, key: str, value: float, match: str) -> None:
    from rlarrow.io.minari import import_minari

    dataset = _minari_copy(tmp_path, "arrow")
    meta_path = dataset / "data" / "0" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    assert meta["total_steps"] == 18
    meta[key] = value
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CorruptFileError, match=match):
        import_minari(dataset, tmp_path / "s", progress=False)


def test_minari_missing_episode_is_refused(tmp_path: Path) -> None:
    from rlarrow.io.minari import import_minari

    dataset = _minari_copy(tmp_path, "parquet")
    shutil.rmtree(dataset / "data" / "9")
    with pytest.raises(CorruptFileError, match="says the dataset has 10 episodes, its data folder has 9"):
        import_minari(dataset, tmp_path / "s", progress=False)
    assert not (tmp_path / "s").exists()  # refused before the store was touched


def test_undamaged_inputs_import_without_warnings(tmp_path: Path) -> None:
    from rlarrow.io.minari import import_minari

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for backend in ("arrow", "parquet"):
            report = import_minari(MINARI / f"{backend}-v0", tmp_path / backend, progress=False)
            assert (report.episodes, report.steps) == (10, 266)
