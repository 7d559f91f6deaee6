"""Damage is found on every read path: a damaged store file never reads as other values.

One file of a store written by rlarrow (every table) is damaged (``tests/fuzz``'s mutations:
bit flips, bytes set, cuts, insertions, deletions, repeats, huge length fields), then its
table is read through every path a user has: ``Store.read``, ``rlarrow.sql``, ``connect``, the
``rlarrow sql`` command, ``scan`` (Polars), and for ``steps`` also ``StreamingDataset``,
``TableDataset``, ``Reader`` and ``iter_episodes``; ``sql`` and ``scan`` filtered too. Each
path must give exactly the undamaged values or an rlarrow error naming the damaged file:
never other values, never DuckDB's, Polars' (a ``PanicException`` among them) or pyarrow's
own exception. Before every path checked page
CRCs, ``sql`` and ``scan`` read 6 of 150 such files as different values and ``scan`` raised
Polars errors on 79.

The quick tests feed a few dozen damaged files; ``-m slow`` many more.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import populate
from fuzz.targets import mutate, random_ops

import rlarrow
from rlarrow.cli.commands import cli
from rlarrow.core.errors import CorruptFileError, RLArrowError

TABLES = ("steps", "episodes", "scalars", "memory")
SEED_RUN: list[str] = []  # the seed store's run id (populate names it)


def _plain(value: Any) -> Any:
    """Tensors, arrays and dicts of them as plain lists and dicts (to compare exactly)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value.tolist() if hasattr(value, "tolist") else value


def _stream(store: Path) -> Any:
    from rlarrow.train.torch import StreamingDataset

    ds = StreamingDataset(store, "steps", columns=["observation", "reward", "step"], batch_size=4,
                          shuffle=False)
    return [_plain(batch) for batch in ds]


def _table_dataset(store: Path) -> Any:
    from rlarrow.train.torch import TableDataset

    ds = TableDataset(store, "steps", columns=["observation", "reward", "step"])
    return [_plain(ds[i]) for i in range(len(ds))]


def _reader(store: Path) -> Any:
    from rlarrow.query.reader import Reader

    with Reader(store) as r:
        return [[repr(step) for step in episode] for episode in r.episodes]


def _episodes(store: Path) -> Any:
    from rlarrow.query import iter_episodes

    return [_plain(episode) for episode in iter_episodes(store)]


def _cli_sql(store: Path, table: str) -> Any:
    result = CliRunner().invoke(cli, ["sql", str(store), f"select * from {table}", "--format", "csv"])
    if result.exit_code == 1 and isinstance(result.exception, SystemExit):
        raise RLArrowError(result.output)  # (its message, as the user reads it)
    assert result.exception is None, f"{type(result.exception).__name__}: {result.exception}"
    return result.output


def _connect(store: Path, table: str) -> Any:
    con = rlarrow.connect(store, warn=False)
    try:
        return con.sql(f"select * from {table}").to_arrow_table().to_pylist()
    finally:
        con.close()


def paths(table: str) -> dict[str, Callable[[Path], Any]]:
    """Every way to read ``table``: a function of the store's path giving what it read.

    Filtered reads too: engines skip row groups by the footer's statistics, which no
    checksum covers.
    """
    import polars as pl

    out: dict[str, Callable[[Path], Any]] = {
        "Store.read": lambda s: rlarrow.Store.open(s, readonly=True).read(table).to_pylist(),
        "sql": lambda s: rlarrow.sql(s, f"select * from {table}").to_pylist(),
        "sql, filtered": lambda s: rlarrow.sql(s, f"select * from {table} where run_id = ?",
                                               params=[SEED_RUN[0]]).to_pylist(),
        "scan, filtered": lambda s: rlarrow.scan(s, table).filter(pl.col("run_id") == SEED_RUN[0])
                                           .collect().to_dicts(),
        "connect": lambda s: _connect(s, table),
        "rlarrow sql": lambda s: _cli_sql(s, table),
        "scan": lambda s: rlarrow.scan(s, table).collect().to_dicts(),
    }
    if table == "steps":
        out.update({"StreamingDataset": _stream, "TableDataset": _table_dataset, "Reader": _reader,
                    "iter_episodes": _episodes})
    return out


@pytest.fixture(scope="module")
def seed(tmp_path_factory) -> tuple[Path, dict[str, dict[str, Any]]]:
    """A store of every table, and what each path reads from it undamaged."""
    path = tmp_path_factory.mktemp("seed") / "seed.rlarrow"
    with rlarrow.Store.create(path) as st:
        SEED_RUN[:] = [populate(st)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = {t: {name: read(path) for name, read in paths(t).items()} for t in TABLES}
    return path, expected


def judge(seed: tuple[Path, dict[str, dict[str, Any]]], tmp: Path, table: str, pick: int,
          damage: Callable[[bytes], bytes]) -> dict[str, str]:
    """Damage one file of ``table`` in a copy of the seed store; how each path took it."""
    base, expected = seed
    store = tmp / "s.rlarrow"
    shutil.copytree(base, store)
    files = sorted((store / table).glob("*.parquet"))
    victim = files[pick % len(files)]
    victim.write_bytes(damage(victim.read_bytes()))
    outcomes = {}
    for name, read in paths(table).items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            error: RLArrowError | None = None
            try:
                got = read(store)
            except RLArrowError as exc:
                error = exc
        if error is not None:
            assert victim.name in str(error), f"{name}: the error does not name {victim.name}: {error}"
            outcomes[name] = "rejected"
            continue
        # (as text: NaN, where iter_episodes fills a null, equals itself there)
        assert repr(got) == repr(expected[table][name]), f"{name}: read other values than the undamaged"
        outcomes[name] = "equal"
    shutil.rmtree(store, ignore_errors=True)  # (a reader's lease may be removing its links)
    return outcomes


CASES = [(TABLES[i % len(TABLES)], i, random_ops(random.Random(i))) for i in range(12)]


@pytest.mark.parametrize(("table", "pick", "ops"), CASES, ids=[f"{t}-{i}" for t, i, _ in CASES])
def test_every_read_path_reads_a_damaged_file_as_it_was_or_names_it(seed, tmp_path, table, pick, ops):
    judge(seed, tmp_path, table, pick, lambda data: mutate(data, ops))


def test_bit_flips_across_a_steps_file_never_read_as_other_values(seed, tmp_path):
    # a flipped bit in a page's values: DuckDB and Polars check no page CRC, and read it
    # as another value unless rlarrow checked the file first
    size = sorted((seed[0] / "steps").glob("*.parquet"))[0].stat().st_size
    seen = set()
    for where in range(4, size - 8, max(1, size // 12)):
        def flip(data: bytes, where: int = where) -> bytes:
            return data[:where] + bytes([data[where] ^ 0x04]) + data[where + 1:]
        seen.update(judge(seed, tmp_path, "steps", 0, flip).values())
    assert "rejected" in seen


def test_a_file_changed_after_it_was_verified_is_verified_again(seed, tmp_path):
    import os

    store = tmp_path / "s.rlarrow"
    shutil.copytree(seed[0], store)
    assert rlarrow.sql(store, "select count(*) as n from scalars").column("n").to_pylist() == [10]
    victim = sorted((store / "scalars").glob("*.parquet"))[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 3] ^= 0x01  # in place, same size, the old modification time put back
    stat = victim.stat()
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    with pytest.raises(CorruptFileError, match=victim.name):
        rlarrow.sql(store, "select * from scalars")
    with pytest.raises(CorruptFileError, match=victim.name):
        rlarrow.scan(store, "scalars")


def test_sql_checks_only_the_tables_a_query_reads_and_names_damage_elsewhere_when_read(seed, tmp_path):
    store = tmp_path / "s.rlarrow"
    shutil.copytree(seed[0], store)
    victim = sorted((store / "memory").glob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:-30])  # its footer cut
    assert rlarrow.sql(store, "select count(*) as n from transitions").column("n").to_pylist() == [15]
    with pytest.raises(CorruptFileError, match=victim.name):
        rlarrow.sql(store, "select count(*) from memory")
    with pytest.raises(CorruptFileError, match=victim.name):
        rlarrow.connect(store)  # a connection may read anything: it checks every table


def test_ray_reads_only_verified_files(seed, tmp_path):
    pytest.importorskip("ray", reason="Ray Data is the optional extra 'ray': pip install 'rlarrow[ray]'")
    import rlarrow.train.ray as rray

    store = tmp_path / "s.rlarrow"
    shutil.copytree(seed[0], store)
    victim = sorted((store / "steps").glob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:-30])  # its footer cut
    with pytest.raises(CorruptFileError, match=victim.name):  # before any Ray task runs
        rray.read(store, "steps")


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("table", TABLES)
def test_many_damaged_files_read_as_they_were_or_named(seed, tmp_path, table):
    counts: dict[str, int] = {}
    for i in range(150):
        ops = random_ops(random.Random(1000 + i))
        where = tmp_path / str(i)
        where.mkdir()
        for outcome in judge(seed, where, table, i, lambda data, ops=ops: mutate(data, ops)).values():
            counts[outcome] = counts.get(outcome, 0) + 1
    assert counts.get("rejected", 0) > 0


def test_the_record_of_checked_files_is_kept_across_processes_and_forgets_changed_files(tmp_path):
    # each `rlarrow sql` is a new process: a file checked whole once is not read again, and a file
    # changed since (its bytes in place, which move its modification time) is checked again
    import pyarrow as pa
    import pyarrow.parquet as pq

    env = {**os.environ, "RLARROW_CACHE_DIR": os.fspath(tmp_path / "cache")}
    path = tmp_path / "part-0.parquet"
    pq.write_table(pa.table({"x": list(range(1000))}), path, write_page_checksum=True)
    os.utime(path, (1e9, 1e9))  # (a file changed in the last seconds is never recorded: see below)
    code = ("import sys, rlarrow.core.store.checked as c\n"
            "c.open_checked = lambda *a, **k: sys.exit(7)  # a read: exit 7\n"
            f"c.verify_pages({os.fspath(path)!r})\n")
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert first.returncode == 7  # nothing recorded yet: the file is read
    subprocess.run([sys.executable, "-c", f"from rlarrow.core.store.checked import verify_pages as v; "
                    f"v({os.fspath(path)!r})"], env=env, check=True)
    again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr  # recorded by another process: not read again
    expired = subprocess.run([sys.executable, "-c", code], env={**env, "RLARROW_RECHECK_SECONDS": "0"},
                             capture_output=True, text=True)
    assert expired.returncode == 7  # a check older than RECHECK_SECONDS is made again (bit rot)
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x01
    with open(path, "r+b") as f:  # (in place: the same inode and size)
        f.write(bytes(data))
    changed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert changed.returncode == 7  # its modification time moved: read again
    # a file replaced by one of the same size, within the clock's tick, on the same inode, would
    # look unchanged: a file changed in the last seconds is checked at every read, never recorded
    recent = tmp_path / "recent.parquet"
    pq.write_table(pa.table({"x": list(range(1000))}), recent, write_page_checksum=True)
    subprocess.run([sys.executable, "-c", f"from rlarrow.core.store.checked import verify_pages as v; "
                    f"v({os.fspath(recent)!r})"], env=env, check=True)
    fresh = subprocess.run([sys.executable, "-c", code.replace(os.fspath(path), os.fspath(recent))], env=env,
                           capture_output=True, text=True)
    assert fresh.returncode == 7
    off = subprocess.run([sys.executable, "-c", code], env={**env, "RLARROW_CACHE_DIR": "off"},
                         capture_output=True, text=True)
    assert off.returncode == 7


def test_half_float_columns_are_whole_not_damaged(tmp_path):
    # skrl's half-precision memories: pyarrow gives float16 statistics as raw bytes and has no
    # min_max of them; a whole file must read, through every checked path
    import numpy as np

    import rlarrow
    from rlarrow.io.memory.snapshot import MemorySnapshot

    values = np.array([1.5, -2.25, np.nan, 3.0, 65504.0, -0.0], np.float16).reshape(6, 1, 1)
    with rlarrow.Store.create(tmp_path / "s") as st:
        snap = MemorySnapshot({"log_prob": values}, name="half")
        st.append("memory", snap.to_table(run_id="r", snapshot_id=0))
    assert rlarrow.sql(tmp_path / "s", "select count(*) as n from memory").column("n").to_pylist() == [6]
    con = rlarrow.connect(tmp_path / "s")
    assert con.sql("select count(*) from memory").fetchall() == [(6,)]
    con.close()


def test_a_querys_own_file_failing_is_not_called_store_damage(tmp_path):
    """A user's read_parquet of another file, or a COPY TO on a full disk, names that file, not the store."""
    store = rlarrow.Store.create(tmp_path / "s")
    populate(store)
    bad = tmp_path / "mine.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(RLArrowError) as caught:
        rlarrow.sql(store, f"select * from read_parquet('{bad}')")
    assert not isinstance(caught.value, CorruptFileError), caught.value
    assert str(bad) in str(caught.value) and "repair" not in str(caught.value), caught.value
    if os.path.exists("/dev/full"):  # a full disk: writes to /dev/full fail with ENOSPC
        full = tmp_path / "out.parquet"
        full.symlink_to("/dev/full")
        with pytest.raises(RLArrowError) as caught:
            rlarrow.sql(store, f"copy (select * from scalars) to '{full}' (format parquet)")
        assert not isinstance(caught.value, CorruptFileError), caught.value
        assert str(full) in str(caught.value) and "damaged" not in str(caught.value), caught.value


def test_a_damaged_file_of_a_store_given_by_a_relative_path_is_named(tmp_path, monkeypatch):
    import duckdb

    from rlarrow.query.duckdb_errors import damaged as _damaged

    monkeypatch.chdir(tmp_path)
    store = rlarrow.Store.create("s")
    populate(store)
    victim = os.path.relpath(store.files("scalars")[0])
    Path(victim).write_bytes(Path(victim).read_bytes()[:-20])  # the footer cut
    (tmp_path / "mine.parquet").write_bytes(b"not parquet")  # (beside the store: not one of its files)
    for path, damaged in ((victim, True), ("mine.parquet", False)):
        with pytest.raises(duckdb.Error) as caught:
            duckdb.sql(f"select * from read_parquet('{path}')").fetchall()
        err = _damaged(store, caught.value)
        assert isinstance(err, CorruptFileError) is damaged, err
        assert path in str(err)
