"""skrl csv memory exports: streamed, bools real, dtypes and num_envs explicit, nothing truncated."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core import tensors
from rlarrow.io.memory.csv import iter_csv_tables, read_csv
from rlarrow.io.memory.npz import read_npz

SKRL = FIXTURES / "skrl"
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def fixture(kind: str, ext: str) -> Path:
    return next((SKRL / kind / "memories").glob(f"*.{ext}"))


@pytest.mark.parametrize(("kind", "filled_rows"), [("wrapped", 64), ("partial", 10)])
def test_real_skrl_csv_matches_the_npz_of_the_same_memory(kind, filled_rows):
    snap = read_csv(fixture(kind, "csv"), num_envs=4, memory_size=64)
    ref = read_npz(fixture(kind, "npz"))
    assert list(snap.tensors) == list(ref.tensors)
    for name, expected in ref.tensors.items():
        got = snap.tensors[name]
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        assert got[:filled_rows].tobytes() == expected[:filled_rows].tobytes(), name
    # csv bools are real bools (skrl's own iterator reads every one as True)
    terminated = snap.tensors["terminated"][:filled_rows]
    assert terminated.dtype == np.bool_ and 0 < terminated.mean() < 0.5
    assert snap.is_full is (kind == "wrapped")
    assert snap.write_pointer == (None if kind == "wrapped" else 10)


def test_streamed_blocks_into_a_store(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s")
    with store.writer("memory") as w:
        for table in iter_csv_tables(fixture("wrapped", "csv"), run_id="r", snapshot_id=0,
                                     num_envs=4, block_size=4096):  # many small blocks
            w.write(table)
    t = store.read("memory")
    assert t.num_rows == 256
    assert t.column("memory_index").to_pylist() == [i // 4 for i in range(256)]
    assert t.column("env_index").to_pylist() == [i % 4 for i in range(256)]
    states = tensors.to_numpy(t.column("states")).reshape(64, 4, 8)
    assert states.tobytes() == read_npz(fixture("wrapped", "npz")).tensors["states"].tobytes()


def test_missing_num_envs_is_said_plainly():
    with pytest.warns(rlarrow.AssumptionWarning, match="does not record num_envs; assuming 1"):
        snap = read_csv(fixture("partial", "csv"))
    assert (snap.memory_size, snap.num_envs) == (40, 1)


def test_values_float32_cannot_hold_are_not_truncated(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("x.0,x.1,flag.0\n0.5,0.1,True\nnan,-0.0,False\n")
    with pytest.raises(rlarrow.UnsupportedInputError, match=r"x.1 in data row 1.*dtype='float64'"):
        read_csv(path, num_envs=1)
    snap = read_csv(path, num_envs=1, dtype="float64")
    x = snap.tensors["x"][:, 0]
    assert x[0].tolist() == [0.5, 0.1]
    assert np.isnan(x[1, 0]) and np.signbit(x[1, 1])
    assert snap.tensors["flag"][:, 0, 0].tolist() == [True, False]


@pytest.mark.parametrize(("text", "error", "message"), [
    ("", rlarrow.CorruptFileError, "empty"),
    ("states,x.0\n1.0,2.0\n", rlarrow.UnsupportedInputError, "not 'name.index'"),
    ("a.0,a.1\n[0.0, 1.0],2.0\n", rlarrow.UnsupportedInputError, "keep_dimensions"),
    ("a.0,b.0\n1.0,2.0\n1.0\n", rlarrow.CorruptFileError, "Expected 2 columns"),
    ("a.0\n1.0\n2.0\n3.0\n", rlarrow.UnsupportedInputError, "do not divide"),
])
def test_bad_csv_is_refused_naming_the_file(tmp_path, text, error, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(error, match=message) as info:
        read_csv(path, num_envs=2 if "divide" in message else 1)
    assert "bad.csv" in str(info.value)


def test_rows_are_memory_table_rows(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("a.0\n" + "".join(f"{i}.5\n" for i in range(6)))
    tables = list(iter_csv_tables(path, run_id="r", snapshot_id=3, num_envs=2, memory_size=5))
    t = pa.concat_tables(tables)
    assert t.column("memory_size").to_pylist() == [5] * 6
    assert t.column("snapshot_id").to_pylist() == [3] * 6
    assert t.column("filled").to_pylist() == [True] * 6


def test_row_count_checks_also_hold_when_memory_size_is_given(tmp_path):
    path = tmp_path / "odd.csv"
    path.write_text("a.0\n1.5\n2.5\n3.5\n")
    with pytest.raises(rlarrow.UnsupportedInputError, match="do not divide"):
        read_csv(path, num_envs=2, memory_size=10)
    with pytest.raises(rlarrow.UnsupportedInputError, match="more than memory_size=1"):
        read_csv(path, num_envs=1, memory_size=1)


def test_an_oversized_header_is_refused_before_it_is_read(tmp_path, clean_env):
    """A 120 MB header line (no line end): refused naming the file, in a few MB of memory."""
    import subprocess
    import sys

    path = tmp_path / "huge.csv"
    with open(path, "wb") as fh:
        names = ",".join(f"states.{i}" for i in range(100_000)).encode() + b","
        while fh.tell() < 120 << 20:
            fh.write(names)
    script = (
        "import rlarrow\n"
        "from rlarrow.io.memory.csv import read_csv\n"
        "def peak():\n"
        "    return next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM'))\n"
        "before = peak()\n"
        "try:\n"
        f"    read_csv({str(path)!r}, num_envs=1)\n"
        "except rlarrow.CorruptFileError as exc:\n"
        "    print(exc)\n"
        "print((peak() - before) // 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env=clean_env, check=False)
    assert out.returncode == 0, out.stderr
    message, grown_mb = out.stdout.strip().rsplit("\n", 1)
    assert "huge.csv" in message and "header line runs past 1,048,576 bytes" in message
    assert ".pt or .npz" in message
    assert int(grown_mb) < 20, f"reading the head took {grown_mb} MB more"


def test_an_oversized_first_row_is_refused(tmp_path):
    path = tmp_path / "row.csv"
    path.write_text("a.0,a.1\n" + "1" * (3 << 20) + "\n")
    with pytest.raises(rlarrow.CorruptFileError, match=r"row\.csv.*first row runs past") as info:
        read_csv(path, num_envs=1)
    assert info.value.offset is not None


def test_wide_memories_parse_whatever_the_block_size(tmp_path):
    """A header longer than a parse block (3000 columns): the block grows to hold it and a row."""
    path = tmp_path / "wide.csv"
    values = np.arange(3 * 3000, dtype=np.float64).reshape(3, 3000) / 8
    path.write_text(",".join(f"s.{i}" for i in range(3000)) + "\n"
                    + "".join(",".join(repr(v) for v in row.tolist()) + "\n" for row in values))
    tables = list(iter_csv_tables(path, run_id="r", snapshot_id=0, num_envs=1, dtype="float64",
                                  block_size=4096))
    got = tensors.to_numpy(pa.concat_tables(tables).column("s"))
    assert np.array_equal(got, values)
