"""A full disk, a file-size limit or a short write never costs a commit.

A real small filesystem (a tmpfs mounted for the test, which needs root) is filled to every
4 KiB of free space below what a commit, a compaction and a migration need; each attempt
either succeeds or raises a StoreError, and afterwards the store opens with every earlier
commit, value for value. Without root the same sweep runs under RLIMIT_FSIZE (a per-file
limit, which makes ``write`` return short counts, the way the full disk did).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import assert_delta_current

import rlarrow
from rlarrow.core import migrations
from rlarrow.core.errors import StoreError
from rlarrow.core.store import MANIFEST_NAME, encode_schema, segments

PAGE = 4096


def scalar_rows(start: int, n: int = 8) -> dict:
    steps = np.arange(start, start + n)
    return {"run_id": "r", "scope": "train", "tag": "loss", "step": steps,
            "value": steps * 0.5, "wall_time": 1.7e9 + steps}


def _mount_tmpfs(mnt: Path, size: str = "16m") -> bool:
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", os.fspath(mnt)],
                          capture_output=True, check=False)
    return done.returncode == 0


def _can_mount() -> bool:
    import tempfile

    with tempfile.TemporaryDirectory() as probe:
        if not _mount_tmpfs(Path(probe), "1m"):
            return False
        subprocess.run(["umount", "-l", probe], check=False)
        return True


needs_mount = pytest.mark.skipif(
    not _can_mount(), reason="mounting a small tmpfs needs root (CAP_SYS_ADMIN); "
    "test_a_file_size_limit_never_costs_a_commit covers the same writes")


@pytest.fixture
def small_fs(tmp_path: Path):
    """A 16 MiB tmpfs mounted at a fresh directory (tests using it are marked needs_mount)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    assert _mount_tmpfs(mnt)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", os.fspath(mnt)], check=False)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@contextlib.contextmanager
def filled(mnt: Path, leave: int):
    """Fill the filesystem at ``mnt`` until about ``leave`` bytes are free."""
    filler = mnt / "filler"
    with open(filler, "wb") as f:
        chunk = b"\0" * (1 << 20)
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - leave))
    try:
        yield
    finally:
        filler.unlink()


@contextlib.contextmanager
def delta_may_lag():
    """A full disk may stop a Delta commit after its manifest: a warning, the commit stands."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Delta log entry", category=rlarrow.RLArrowWarning)
        yield


def snapshot(path: Path) -> dict[str, pa.Table]:
    store = rlarrow.Store.open(path, readonly=True)
    return {t: store.read(t) for t in ("scalars", "runs")}


def assert_kept(path: Path, before: dict[str, pa.Table], *, table: str = "scalars") -> pa.Table:
    """The store opens for writing, and every row committed before is there, in order."""
    with rlarrow.Store.open(path) as store:
        after = store.read(table)
        info = store.info()
        assert_delta_current(store)  # a Delta commit the full disk stopped is written now
    rows = before[table].num_rows
    assert after.slice(0, rows).equals(before[table]) or \
        after.sort_by("step").slice(0, rows).equals(before[table].sort_by("step"))
    assert info.tables[table].rows == after.num_rows
    return after


def sweep(mnt: Path, store_path: Path, operation, *, limit: int = 2 << 20) -> list[str]:
    """Run ``operation`` with 0, 4 KiB, 8 KiB, ... free until it succeeds; return the failures.

    The store is read once, before the first level: each failed level asserts that it left every
    row as it was, so that one snapshot is the state before every level (reading it again at each
    level, 560 files, was a third of the sweep's CPU time).
    """
    failures: list[str] = []
    leave = 0
    before = snapshot(store_path)
    while leave < limit:
        try:
            with filled(mnt, leave), delta_may_lag():
                operation()
        except StoreError as exc:
            failures.append(str(exc))
            after = assert_kept(store_path, before)
            assert after.num_rows == before["scalars"].num_rows  # a failure commits nothing
            leave += PAGE
            continue
        assert_kept(store_path, before)
        return failures
    raise AssertionError(f"the operation never succeeded with up to {limit} bytes free")


def many_commits(path: Path, commits: int) -> None:
    with rlarrow.Store.create(path, auto_compact=None) as store:
        store.add_run(source="test", run_id="r")
        for i in range(commits):
            store.append("scalars", scalar_rows(8 * i))


@pytest.mark.slow
@needs_mount
def test_a_full_disk_never_costs_a_commit(small_fs, monkeypatch):
    monkeypatch.setattr(segments, "SEGMENT_FILES", 10_000)  # (one long list: segments have their test)
    path = small_fs / "store"
    many_commits(path, 560)  # a manifest of ~45 KB: its rewrite needs more room than the data
    assert (path / MANIFEST_NAME).stat().st_size > 10 * PAGE

    def append() -> None:
        with rlarrow.Store.open(path, auto_compact=None) as store:
            store.append("scalars", scalar_rows(10_000))

    failures = sweep(small_fs, path, append)
    assert any(".parquet" in f for f in failures), failures  # the data file's write failed
    assert any(MANIFEST_NAME in f for f in failures), failures  # and the manifest's
    assert all("every earlier commit is intact" in f for f in failures)

    def compact() -> None:
        with rlarrow.Store.open(path, auto_compact=None) as store:
            store.compact("scalars")

    failures = sweep(small_fs, path, compact)
    assert any(MANIFEST_NAME in f for f in failures) and any("rewriting" in f for f in failures), failures
    with rlarrow.Store.open(path) as store:
        assert len(store.files("scalars")) == 1
        assert store.read("scalars").column("step").to_pylist()[:8] == list(range(8))
    assert not list(path.rglob(".tmp-*")) and not list(path.glob(f".{MANIFEST_NAME}*"))


@pytest.mark.slow
@needs_mount
def test_a_full_disk_while_a_manifest_segment_is_written_never_costs_a_commit(small_fs, monkeypatch):
    monkeypatch.setattr(segments, "SEGMENT_FILES", 128)  # (a segment of ~10 KB)
    path = small_fs / "store"
    many_commits(path, 255)  # the next append completes the second segment

    def append() -> None:
        with rlarrow.Store.open(path, auto_compact=None) as store:
            store.append("scalars", scalar_rows(10_000))

    failures = sweep(small_fs, path, append)
    assert any(segments.SEGMENTS_DIR in f for f in failures), failures  # the segment's write failed
    assert all("every earlier commit is intact" in f for f in failures)
    code = ("import rlarrow, sys; s = rlarrow.Store.open(sys.argv[1], readonly=True); "
            "print(s.row_count('scalars'), len(s.files('scalars')))")
    out = subprocess.run([sys.executable, "-c", code, os.fspath(path)], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == [str(8 * 256), "256"]  # a new process reads every segment
    assert len(list((path / segments.SEGMENTS_DIR).glob("*.json"))) >= 2


@pytest.mark.slow
@needs_mount
def test_a_full_disk_during_migration_leaves_the_store_as_it_was_or_migrated(small_fs):
    path = small_fs / "old"
    rlarrow.Store.create(path).close()
    rows = []
    for i in range(40):  # 40 files of a test-only v0 layout, with a large manifest
        part = pa.table({"run_id": ["r"] * 8, "scope": ["train"] * 8, "tag": ["loss"] * 8,
                         "step": pa.array(np.arange(8 * i, 8 * i + 8)), "value": np.arange(8.0),
                         "time": np.arange(8.0)}).replace_schema_metadata(
            {"rlarrow.table": "scalars", "rlarrow.schema_version": "0.3", "rlarrow.format_version": "1.0"})
        name = f"part-2020{i:04d}T000000000000-{i:08x}.parquet"
        pq.write_table(part, path / "scalars" / name)
        rows.append({"name": name, "rows": 8, "bytes": (path / "scalars" / name).stat().st_size})
    m = json.loads((path / MANIFEST_NAME).read_text())
    m["tables"]["scalars"].update(schema_version="0.3", rows=8 * 40, files=rows,
                                  schema=encode_schema(part.schema.remove_metadata()))
    (path / MANIFEST_NAME).write_text(json.dumps(m))

    @migrations.register_migration("scalars", from_major=0)
    def v0_to_v1(table: pa.Table) -> pa.Table:
        return table.rename_columns(["wall_time" if n == "time" else n for n in table.column_names])

    try:
        leave, failures = 0, []
        while True:
            with filled(small_fs, leave), delta_may_lag():
                try:
                    rlarrow.migrate(path)
                    break
                except StoreError as exc:
                    failures.append(str(exc))
            leave += PAGE
        assert failures and any(MANIFEST_NAME in f for f in failures)
        # each says exactly what it committed: nothing, or the files rewritten before it stopped
        for f in failures:
            nothing = "Nothing of this operation was committed" in f or "the store is as it was" in f
            assert nothing != ("stopped part way" in f), f
        assert any("Committed before it stopped (kept, readable): scalars (" in f for f in failures)
    finally:
        migrations.unregister_migration("scalars", from_major=0)
    with rlarrow.Store.open(path) as store:  # (a Delta commit the full disk stopped is written now)
        table = store.read("scalars")
        assert_delta_current(store)
    assert table.column("step").to_pylist() == list(range(320))


def test_a_file_size_limit_never_costs_a_commit(tmp_path):
    """RLIMIT_FSIZE makes write() return short counts past the limit, as the full disk did."""
    path = tmp_path / "store"
    many_commits(path, 150)
    manifest_size = (path / MANIFEST_NAME).stat().st_size
    before = snapshot(path)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    failures = []
    try:
        with rlarrow.Store.open(path, auto_compact=None) as store:
            for limit in (100, 2000, manifest_size // 2, manifest_size - 10):
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
                try:
                    store.append("scalars", scalar_rows(10_000))
                except StoreError as exc:
                    failures.append(str(exc))
                finally:
                    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    finally:
        signal.signal(signal.SIGXFSZ, old)
    assert len(failures) == 4, failures
    assert any(MANIFEST_NAME in f for f in failures) and any("partial" in f for f in failures)
    after = assert_kept(path, before)
    assert after.num_rows == before["scalars"].num_rows
    json.loads((path / MANIFEST_NAME).read_text())  # whole
    assert not list(path.glob(f".{MANIFEST_NAME}*")) and not list(path.rglob(".tmp-*"))


def test_short_writes_still_write_the_whole_manifest(tmp_path, monkeypatch):
    """A write() that takes only part of the bytes (allowed by POSIX) is continued, not trusted."""
    path = tmp_path / "store"
    many_commits(path, 20)
    real_write = os.write

    def short_write(fd: int, data) -> int:
        return real_write(fd, bytes(data[:777]))

    monkeypatch.setattr(os, "write", short_write)
    with rlarrow.Store.open(path) as store:
        store.append("scalars", scalar_rows(1000))
    monkeypatch.undo()
    assert rlarrow.Store.open(path, readonly=True).row_count("scalars") == 21 * 8


@needs_mount
def test_read_only_media_open_for_reading_and_refuse_writes_clearly(small_fs):
    path = small_fs / "store"
    many_commits(path, 3)
    subprocess.run(["mount", "-o", "remount,ro", os.fspath(small_fs)], check=True)
    try:
        store = rlarrow.Store.open(path)  # the default: read-only here, as the README reads it
        assert store.readonly and store.read("scalars").num_rows == 24
        with pytest.raises(StoreError, match="read-only media"):
            store.append("scalars", scalar_rows(100))
        with pytest.raises(StoreError, match="read-only"):
            rlarrow.Store.open(path, readonly=False)
        assert rlarrow.sql(path, "select count(*) as n from scalars").column("n").to_pylist() == [24]
    finally:
        subprocess.run(["mount", "-o", "remount,rw", os.fspath(small_fs)], check=True)


# ------------------------------------------------------------------ every command of the CLI

FIXTURES = Path(__file__).parent / "fixtures"


def _cli_store(path: Path) -> dict[str, str]:
    """A store of real peer files: a Minari dataset, skrl memory exports, TensorBoard events."""
    from rlarrow.io.importing import import_paths

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import_paths([FIXTURES / "minari" / "cartpole" / "hdf5-v0"], path, progress=False, run_id="minari")
        import_paths([FIXTURES / "skrl" / "wrapped" / "memories"], path, progress=False, run_id="skrl",
                     episodes=True, num_envs=4)
        import_paths([FIXTURES / "tfevents"], path, progress=False, run_id="events")
    with rlarrow.Store.open(path, auto_compact=None) as store:
        for i in range(4):  # small files for compact to merge
            store.append("scalars", dict(scalar_rows(100 + 8 * i), run_id="events"))
    return {"minari": "minari", "skrl": "skrl", "events": "events"}


def _other_store(path: Path) -> None:
    with rlarrow.Store.create(path) as store:
        store.add_run(source="test", run_id="other")
        store.append("scalars", dict(scalar_rows(0), run_id="other"))


#: every command `rlarrow --help` lists, with the arguments that make it write (STORE, OUT, OTHER
#: are replaced): (id, arguments, what it writes outside the store)
CLI_OPERATIONS = [
    ("convert", ["convert", os.fspath(FIXTURES / "skrl" / "partial" / "memories"), "-o", "STORE",
                 "--run-id", "new", "--episodes", "--num-envs", "4"], None),
    ("convert-new", ["convert", os.fspath(FIXTURES / "skrl" / "partial" / "memories"), "-o", "OUT"], "OUT"),
    ("delete", ["delete", "STORE", "--run", "skrl"], None),
    ("delete-episode", ["delete", "STORE", "--run", "minari", "--episode", "1"], None),
    ("label", ["label", "STORE", "--run", "minari", "--episode", "2", "--set", "split=val"], None),
    ("label-run", ["label", "STORE", "--run", "skrl", "--set", "split=train"], None),
    ("merge", ["merge", "STORE", "OTHER"], None),
    ("compact", ["compact", "STORE"], None),
    ("migrate", ["migrate", "STORE"], None),
    ("vacuum", ["vacuum", "STORE", "--retain-hours", "0"], None),
    ("repair", ["repair", "STORE", "--apply"], None),
    ("info", ["info", "STORE"], None),
    ("history", ["history", "STORE"], None),
    ("check", ["check", "STORE"], None),
    ("stats", ["stats", "STORE"], None),
    ("sql", ["sql", "STORE", "select * from steps", "-o", "OUT/steps.parquet", "--format", "parquet"], "OUT"),
    ("plot", ["plot", "STORE", "--tag", "loss", "-o", "OUT/loss.png"], "OUT"),
    ("push", ["push", "STORE", "OUT/copy"], "OUT"),
    *[(f"export-{fmt}", ["export", "STORE", "-o", "OUT", "--format", fmt, "--run-id", "skrl"], "OUT")
      for fmt in ("pt", "npz", "csv", "parquet")],
    *[(f"export-{fmt}", ["export", "STORE", "-o", "OUT" if fmt != "robomimic" else "OUT/demo.hdf5",
                         "--format", fmt, "--run-id", "minari"], "OUT")
      for fmt in ("minari", "rlds", "robomimic", "lerobot", "envlogger")],
    ("export-tfevents", ["export", "STORE", "-o", "OUT", "--format", "tfevents", "--run-id", "events"],
     "OUT"),
]


EXPORTS = [(i, a) for i, a, _ in CLI_OPERATIONS if a[0] == "export"]


def _needs(op: str) -> list[pytest.MarkDecorator]:
    """The skip an operation needs: envlogger is a test-only peer."""
    if op != "export-envlogger":
        return []
    from test_episodes import _envlogger_loads

    return [pytest.mark.skipif(not _envlogger_loads(), reason="needs envlogger 1.2 (test-only peer): "
                               "pip install 'envlogger<1.3'")]


def _export_target(out: Path, args: list[str]) -> Path:
    return out / "demo.hdf5" if "OUT/demo.hdf5" in args else out


def _reimported(out: Path, args: list[str], scratch: Path) -> str:
    """What an export at ``out`` holds, imported back with rlarrow's importer: every table's rows
    but the run ids (which the import chose), as text (so that NaN compares equal), metadata JSON
    with its keys sorted (envlogger keeps a dict as a protobuf map, in no order)."""
    import tempfile

    from rlarrow.io.importing import import_paths

    store = Path(tempfile.mkdtemp(dir=scratch)) / "back"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import_paths([_export_target(out, args)], store, progress=False, run_id="back")
    st = rlarrow.Store.open(store, readonly=True)
    tables = {t: st.read(t) for t in ("steps", "episodes", "memory", "scalars")}
    assert any(t.num_rows for t in tables.values()), f"{out}: the export imports back empty"
    def canonical(row: dict) -> dict:
        return {k: json.dumps(json.loads(v), sort_keys=True) if k.startswith("metadata") and v else v
                for k, v in row.items()}

    return repr({t: [canonical(r) for r in tab.drop_columns(["run_id"]).to_pylist()]
                 for t, tab in tables.items()})


_REFERENCES: dict[tuple[str, ...], str] = {}
_REFERENCE_BYTES: dict[tuple[str, ...], int] = {}  # (what each export takes on disk, in whole blocks)


def _reference(base: Path, args: list[str]) -> str:
    """The content of export ``args`` of ``base``, written with a relative -o on a normal disk."""
    key = tuple(args)
    if key not in _REFERENCES:
        from click.testing import CliRunner

        from rlarrow.cli import cli

        cwd = base.parent / f"ref-{len(_REFERENCES)}"
        cwd.mkdir()
        real = [{"STORE": os.fspath(base), "OUT": "out"}.get(a, a.replace("OUT/", "out/")) for a in args]
        old = os.getcwd()
        os.chdir(cwd)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = CliRunner().invoke(cli, real, catch_exceptions=True)
        finally:
            os.chdir(old)
        assert result.exit_code == 0, f"{' '.join(real)} in {cwd}: {result.output}"
        assert sorted(p.name for p in cwd.iterdir()) == ["out"], "a relative -o wrote beside its target"
        _REFERENCES[key] = _reimported(cwd / "out", args, base.parent)
        _REFERENCE_BYTES[key] = sum(p.stat().st_blocks * 512 for p in (cwd / "out").rglob("*") if p.is_file())
    return _REFERENCES[key]


@pytest.mark.parametrize("args", [pytest.param(a, id=i, marks=_needs(i)) for i, a in EXPORTS])
def test_every_export_takes_a_relative_target(cli_base, args):
    """``rlarrow export -o RELATIVE`` writes there, for every format, and the export imports back.

    (Minari's writer joined a relative path with itself: issue 36.)"""
    _reference(cli_base, args)


def _fs_listing(root: Path) -> set[str]:
    return {os.fspath(p.relative_to(root)) for p in root.rglob("*")}


def _try_cli(mnt: Path, store: Path, args: list[str], leave: int) -> tuple[object, str]:
    """Run ``rlarrow --debug ARGS`` with about ``leave`` bytes free: (its exception or None, output)."""
    from click.testing import CliRunner

    from rlarrow.cli import cli

    real = [{"STORE": os.fspath(store), "OUT": os.fspath(mnt / "out"), "OTHER": os.fspath(mnt / "other")}.get(
        a, a.replace("OUT/", os.fspath(mnt / "out") + "/")) for a in args]
    with filled(mnt, leave), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = CliRunner().invoke(cli, ["--debug", *real], catch_exceptions=True)
    return (result.exception if result.exit_code else None), result.output


def _sweep_cli(mnt: Path, base: Path, args: list[str], outside: str | None, levels: list[int]) -> list[str]:
    """Each level: a fresh copy of ``base``, the command run, (a)-(c) of the module doc asserted."""
    import shutil

    from rlarrow.core.errors import RLArrowError

    store = mnt / "store"
    failures = []
    # each level starts from a fresh copy of ``base``: its row counts are ``base``'s
    before_rows = {t: rlarrow.Store.open(base, readonly=True).row_count(t) for t in ("steps", "scalars")}
    for leave in levels:
        for p in (store, mnt / "out", mnt / "other"):
            shutil.rmtree(p, ignore_errors=True)
        shutil.copytree(base, store)
        if "OTHER" in args:
            _other_store(mnt / "other")
        listed = _fs_listing(mnt)
        error, output = _try_cli(mnt, store, args, leave)
        where = f"{args[0]} with {leave} bytes free"
        # (a) an rlarrow error, never a raw OSError or a traceback
        assert error is None or isinstance(error, RLArrowError), f"{where}: {error!r}\n{output}"
        assert "Traceback" not in output, f"{where}: {output}"
        # (b) the store opens, with every earlier commit, and passes `rlarrow check`
        with rlarrow.Store.open(store, readonly=True) as st:
            assert not st.info().problems, where
            if error is not None and args[0] not in ("compact", "migrate"):
                assert {t: st.row_count(t) for t in before_rows} == before_rows, where
        # (c) no temporary files in the store, nothing partial outside it
        new = _fs_listing(mnt) - listed
        assert not [n for n in new if "tmp" in n.rsplit("/", 1)[-1] or n.endswith((".partial", ".tmp"))
                    or "rlarrow-new" in n], f"{where}: left {sorted(new)}"
        if error is None:
            if args[0] == "export":  # an export that says OK holds what a normal disk's export does
                assert _reimported(mnt / "out", args, base.parent) == _reference(base, args), where
            return failures
        failures.append(str(error))
        if outside is not None:  # an export, a new store: nothing of it, not even its directory
            assert not (mnt / "out").exists(), f"{where}: left {sorted(new)}"
    return failures


@pytest.fixture(scope="module")
def cli_base(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("full-disk") / "base"
    _cli_store(base)
    return base


@pytest.fixture(scope="module")
def cli_fs(tmp_path_factory):
    mnt = tmp_path_factory.mktemp("fs") / "mnt"
    mnt.mkdir()
    assert _mount_tmpfs(mnt, "12m")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", os.fspath(mnt)], check=False)


@needs_mount
@pytest.mark.parametrize(("args", "outside"), [pytest.param(a, o, id=i, marks=_needs(i))
                                               for i, a, o in CLI_OPERATIONS])
def test_every_command_on_a_full_disk_fails_cleanly_or_succeeds(cli_fs, cli_base, args, outside):
    """A few levels of free space below what each command needs: (a) an rlarrow error, never a raw
    OSError or a traceback, (b) the store opens with every earlier commit and checks clean, (c) no
    temporary file in it and nothing partial outside it."""
    _sweep_cli(cli_fs, cli_base, args, outside, [0, 8 * PAGE, 24 * PAGE])


@pytest.mark.slow
@needs_mount
@pytest.mark.parametrize(("args", "outside"), [
    pytest.param(a, o, id=i, marks=_needs(i)) for i, a, o in CLI_OPERATIONS])
def test_every_command_at_every_level_of_free_space(cli_fs, cli_base, args, outside):
    """The same, at every 4 KiB of free space until the command succeeds."""
    levels = _levels(cli_base, args)
    failures = _sweep_cli(cli_fs, cli_base, args, outside, levels)
    assert len(failures) < len(levels), f"{args[0]} never succeeded"


#: the exports that write in a child interpreter (rlarrow.core.targets.in_child: HDF5 can crash
#: its process on a full disk), so that each level of their sweep costs an interpreter's start
IN_CHILD = ("minari", "robomimic")
#: the levels swept every 4 KiB at each end: the first (no room for the file, then for its
#: header), the last (the last data, the metadata HDF5 writes at close, the side files, the rename)
EDGE = 4 * PAGE
#: the step between: the HDF5 writer fails the same few ways in turn as it fills each 16 KiB
#: (an error at the flush of its metadata, or a crash: SIGSEGV), and 3 pages is prime to 4,
#: so that the levels still land in each phase of that cycle, over and over
STEP = 3 * PAGE


def _levels(base: Path, args: list[str]) -> list[int]:
    """Every 4 KiB of free space from none to 8 MiB (the sweep stops at the first success); for an
    export written in a child interpreter, every 4 KiB at both ends of what it takes on a normal
    disk and every ``STEP`` between (44 levels for Minari's export became 24)."""
    every = list(range(0, 8 << 20, PAGE))
    if args[0] != "export" or args[args.index("--format") + 1] not in IN_CHILD:
        return every
    _reference(base, args)
    end = max(EDGE, (_REFERENCE_BYTES[tuple(args)] - 2 * EDGE) // PAGE * PAGE)
    return [*range(0, EDGE, PAGE), *range(EDGE, end, STEP), *range(end, 8 << 20, PAGE)]
