"""A store never reaches outside itself, a bad manifest ends in an rlarrow error, repair works.

A store is something people download and share. These tests put a victim file beside a
store (``sandbox/outside``) and point the store's manifest at it every way a hostile or
damaged manifest can: every command must refuse with an rlarrow error and leave every
file outside the store as it was.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlarrow
from rlarrow.cli.commands import cli
from rlarrow.core.errors import CorruptFileError, RLArrowError
from rlarrow.core.store import MANIFEST_NAME


@pytest.fixture
def sandbox(tmp_path: Path, populated: rlarrow.Store):
    """(store path, outside dir): the populated store copied next to a directory of victims."""
    root = tmp_path / "sandbox"
    store = root / "store"
    shutil.copytree(populated.path, store)
    outside = root / "outside"
    outside.mkdir()
    victim = rlarrow.Store.open(store, readonly=True).files("scalars")[0]
    shutil.copy(victim, outside / "victim.parquet")  # a file compaction would happily merge
    (outside / "notes.txt").write_text("not the store's")
    return store, outside


def listing(directory: Path) -> dict[str, bytes]:
    return {os.fspath(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file()}


def edit(store: Path, fn) -> None:
    path = store / MANIFEST_NAME
    m = json.loads(path.read_text())
    fn(m)
    path.write_text(json.dumps(m))


def run_cli(*args: str):
    result = CliRunner().invoke(cli, list(args))
    # an error is a message and exit status 1, never a traceback
    assert result.exit_code in (0, 1), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        f"{type(result.exception).__name__}: {result.exception}"
    return result


def every_command(store: Path, tmp: Path) -> list[tuple[str, object]]:
    """What each command did with the store: ('ok', value) or ('error', rlarrow error)."""
    outcomes: list[tuple[str, object]] = []

    def attempt(name, fn):
        try:
            outcomes.append((name, fn()))
        except RLArrowError as exc:
            outcomes.append((name, exc))

    attempt("open", lambda: rlarrow.Store.open(store).close())
    attempt("open readonly", lambda: rlarrow.Store.open(store, readonly=True).read("scalars"))
    attempt("read", lambda: rlarrow.Store.open(store).read("scalars"))
    attempt("sql", lambda: rlarrow.sql(store, "select * from scalars"))
    attempt("compact", lambda: rlarrow.Store.open(store).compact())
    for args in (["info", str(store)], ["sql", str(store), "select count(*) from scalars"],
                 ["compact", str(store)], ["repair", str(store)],
                 ["convert", str(tmp / "none.npz"), "-o", str(store)]):
        outcomes.append((" ".join(args[:1]), run_cli(*args).exit_code))
    return outcomes


OUTSIDE_NAMES = ["../outside/victim.parquet", "../../sandbox/outside/victim.parquet", "ABSOLUTE",
                 "../outside", "sub/part-x.parquet", ".hidden.parquet", "..", "part-x.parquet\x00.txt"]


@pytest.mark.parametrize("where", ["files", "retired", "pending.new", "pending.old"])
@pytest.mark.parametrize("name", OUTSIDE_NAMES)
def test_a_manifest_cannot_make_rlarrow_touch_a_file_outside_the_store(sandbox, tmp_path, where, name):
    store, outside = sandbox
    if name == "ABSOLUTE":
        name = os.fspath(outside / "victim.parquet")
    before = listing(outside)

    def hostile(m):
        files = m["tables"]["scalars"]["files"]
        if where == "files":
            files.append({"name": name, "rows": 10, "bytes": 100})
            m["tables"]["scalars"]["rows"] += 10
        elif where == "retired":
            m["retired"] = [f"scalars/{name}"]
        else:
            new = [name] if where == "pending.new" else ["part-29990101T000000000000-00000000.parquet"]
            m["pending"] = {"op": "compact", "table": "scalars",
                            "old": [name] if where == "pending.old" else [files[0]["name"]],
                            "new": new, "new_entries": [{"name": new[0], "rows": 10, "bytes": 1}]}

    edit(store, hostile)
    outcomes = every_command(store, tmp_path)
    assert listing(outside) == before  # nothing outside was deleted, renamed or changed
    errors = [o for _, o in outcomes if isinstance(o, Exception)]
    assert len(errors) == 5 and all(isinstance(e, CorruptFileError) for e in errors), outcomes
    assert all(str(store / MANIFEST_NAME) in str(e) for e in errors)
    # every CLI command refused too, but repair: its dry run says it would rebuild the manifest
    # from the tables' Delta logs (which name no such file), and changes nothing
    assert all(code == 1 for command, code in outcomes[5:] if command != "repair")
    assert dict(outcomes[5:])["repair"] == 0


def test_a_listed_file_that_links_outside_is_refused_and_repair_drops_only_the_link(sandbox, tmp_path):
    store, outside = sandbox
    listed = rlarrow.Store.open(store, readonly=True).files("scalars")[0]
    listed.unlink()
    listed.symlink_to(outside / "victim.parquet")
    before = listing(outside)
    with pytest.raises(CorruptFileError, match="symbolic link"):
        rlarrow.Store.open(store).read("scalars")
    with pytest.raises(RLArrowError):
        rlarrow.sql(store, "select * from scalars")
    info = run_cli("info", str(store))
    assert info.exit_code == 0 and listed.name in info.output and "symbolic link" in info.output
    run_cli("compact", str(store))  # one file: nothing to merge, and nothing read through the link
    repaired = run_cli("repair", str(store), "--apply")
    assert repaired.exit_code == 0 and "10 row(s)" in repaired.output, repaired.output
    assert not listed.is_symlink() and listing(outside) == before
    assert rlarrow.Store.open(store).row_count("scalars") == 0


def test_links_dropped_into_a_table_are_never_adopted(sandbox):
    store, outside = sandbox
    link = store / "scalars" / "part-29990101T000000000000-0badc0de.parquet"
    link.symlink_to(outside / "victim.parquet")
    before = listing(outside)
    s = rlarrow.Store.open(store)
    assert s.row_count("scalars") == 10 and link.is_symlink()  # neither adopted nor deleted
    s.compact()
    assert listing(outside) == before


def test_a_table_directory_that_is_a_link_is_refused(sandbox):
    store, outside = sandbox
    shutil.rmtree(store / "memory")
    (store / "memory").symlink_to(outside, target_is_directory=True)
    with pytest.raises(CorruptFileError, match="symbolic link"):
        rlarrow.Store.open(store, readonly=True)


@pytest.mark.parametrize(("path", "value"), [
    (("format_version",), "1e400"),
    (("tables", "steps", "schema_version"), "1e400"),
    (("tables", "steps", "rows"), "12"),
    (("tables", "steps", "rows"), -1),
    (("tables", "steps", "files"), {}),
    (("tables", "steps"), []),
    (("tables",), []),
    (("retired",), "steps/x"),
    (("pending",), []),
    (("tables", "steps", "schema"), 7),
])
def test_a_wrong_type_in_the_manifest_is_a_corrupt_file_error_naming_the_key(populated, path, value):
    def set_value(m):
        target = m
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    edit(populated.path, set_value)
    with pytest.raises(CorruptFileError, match=path[-1]):
        rlarrow.Store.open(populated.path, readonly=True)
    result = run_cli("info", str(populated.path))
    assert result.exit_code == 1 and "damaged store manifest" in result.output


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2, 2**70), st.floats(allow_nan=True),
                   st.text(max_size=12), st.just("../x.parquet"), st.lists(st.integers(), max_size=2),
                   st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_any_mutated_manifest_ends_in_an_rlarrow_error(populated, tmp_path_factory, data):
    """Types, keys and values changed anywhere: every command succeeds or says what is wrong."""
    store = tmp_path_factory.mktemp("m") / "store"
    shutil.copytree(populated.path, store)
    m = json.loads((store / MANIFEST_NAME).read_text())
    mutated = copy.deepcopy(m)
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in _paths(mutated) if p]
        target_path = data.draw(st.sampled_from(paths))
        parent = mutated
        for key in target_path[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            del parent[target_path[-1]]
        else:
            parent[target_path[-1]] = data.draw(VALUES)
    (store / MANIFEST_NAME).write_text(json.dumps(mutated))
    every_command(store, tmp_path_factory.mktemp("t"))


def test_repair_drops_a_damaged_file_and_the_rest_reads_again(populated):
    path = populated.path
    victim = populated.files("episodes")[0]
    lost = populated.row_count("episodes")
    victim.write_bytes(victim.read_bytes()[:-40])  # truncate the footer
    with pytest.raises(CorruptFileError, match="rlarrow repair"):
        rlarrow.Store.open(path).read("episodes")
    info = run_cli("info", str(path))
    assert info.exit_code == 0 and victim.name in info.output and "repair" in info.output
    dry = run_cli("repair", str(path))
    assert dry.exit_code == 0 and "would drop" in dry.output and f"{lost} row(s)" in dry.output
    assert victim.exists()  # a dry run changes nothing
    done = run_cli("repair", str(path), "--apply")
    assert done.exit_code == 0 and "dropped 1 file(s)" in done.output, done.output
    assert not victim.exists() and (path / "_damaged" / "episodes" / victim.name).exists()
    store = rlarrow.Store.open(path)
    assert store.row_count("episodes") == 0 and store.read("episodes").num_rows == 0
    assert store.read("steps").num_rows == 18  # every other table as it was
    assert store.info().problems == []
    assert rlarrow.sql(path, "select count(*) as n from steps").column("n").to_pylist() == [18]
    store.compact()


def test_a_missing_file_is_named_by_info_and_dropped_by_repair(populated):
    victim = populated.files("scalars")[0]
    victim.unlink()
    problems = rlarrow.Store.open(populated.path, readonly=True).info().problems
    assert [(p.file, p.problem, p.rows) for p in problems] == [(f"scalars/{victim.name}", "missing", 10)]
    report = rlarrow.Store.open(populated.path).repair(apply=True)
    assert report.rows_lost == 10
    assert rlarrow.Store.open(populated.path).read("scalars").num_rows == 0


def test_a_connection_reads_its_view_after_a_compaction_and_vacuum(populated):
    import gc

    import duckdb
    import polars as pl

    for i in range(3):
        populated.append("scalars", {"run_id": "r", "scope": "train", "tag": "x", "step": [i],
                                     "value": [1.0]})
    con = rlarrow.connect(populated.path)
    assert con.sql("select count(*) from scalars").fetchall() == [(13,)]
    assert populated.compact("scalars")["scalars"] == (4, 1)
    # the old files leave the table directory at once (kept aside for earlier versions): a plain
    # glob counts each row once as soon as compact() returns, and after a vacuum
    for glob in (f"{populated.path}/scalars/*.parquet", f"{populated.path}/scalars/**/*.parquet"):
        assert duckdb.sql(f"select count(*) from read_parquet('{glob}')").fetchall() == [(13,)]
        assert pl.scan_parquet(glob).select(pl.len()).collect().item() == 13
    populated.vacuum(retain_hours=0)
    assert duckdb.sql(f"select count(*) from read_parquet('{glob}')").fetchall() == [(13,)]
    # ... and the connection, planned before, still reads its view
    assert con.sql("select count(*) from scalars").fetchall() == [(13,)]
    views = populated.path / ".rlarrow-views"
    assert len(list(views.iterdir())) == 1
    con.close()
    del con
    gc.collect()
    assert list(views.iterdir()) == []  # the links go with the reader
    frame = rlarrow.scan(populated.path, "scalars").filter(pl.col("tag") == "x")  # derived frames work
    assert frame.select(pl.len()).collect().item() == 3


def test_repair_moves_out_an_unlisted_damaged_file_that_stops_writers(populated):
    stray = populated.path / "steps" / "part-29990101T000000000000-0badf00d.parquet"
    stray.write_bytes(b"PAR1 not really parquet")
    with pytest.raises(CorruptFileError, match="rlarrow repair"):
        rlarrow.Store.open(populated.path)
    dry = run_cli("repair", str(populated.path))
    assert dry.exit_code == 0 and stray.name in dry.output and "not listed" in dry.output
    assert run_cli("repair", str(populated.path), "--apply").exit_code == 0
    assert not stray.exists() and (populated.path / "_damaged" / "steps" / stray.name).exists()
    assert rlarrow.Store.open(populated.path).row_count("steps") == 18


def test_a_live_reader_keeps_its_links_whatever_its_pid_says_and_dead_ones_are_swept(populated):
    import numpy as np

    views = populated.path / ".rlarrow-views"
    lease = populated.lease()
    # a reader of another PID namespace or host: a pid that means nothing here
    lease.directory = views / "otherhost-99999999-deadbeef"
    pinned = lease.pin_view(populated, ["scalars"])["scalars"]
    populated.append("scalars", {"run_id": "r", "scope": "t", "tag": "y", "step": np.arange(80),
                                 "value": np.zeros(80)})
    populated.compact()  # a writer's sweep: the lease's lock is held, so its links stay
    rlarrow.Store.open(populated.path).close()
    assert all(p.exists() for p in pinned) and lease.directory.is_dir()
    lease.release()
    assert not lease.directory.exists()
    # a reader that died without releasing (its lock went with it) is swept by the next writer
    (views / "somehost-1-00000000").mkdir()
    (views / "somehost-1-00000000" / ".held").touch()
    rlarrow.Store.open(populated.path).close()
    assert not (views / "somehost-1-00000000").exists()


def test_a_lease_is_locked_before_a_sweep_can_see_it_and_pins_survive_its_directory(populated):
    import shutil

    lease = populated.lease()
    first = lease.pin(populated.files("scalars")[0])
    held = [p.name for p in lease.directory.iterdir() if p.name.startswith(".held")]
    assert held == [".held"]  # named only once locked: a writer's sweep cannot take it meanwhile
    rlarrow.Store.open(populated.path).close()  # a sweep
    assert first.exists()
    shutil.rmtree(lease.directory)  # gone by hand: pins go to a new directory, not to plain paths
    again = lease.pin(populated.files("scalars")[0])
    assert again.exists() and ".rlarrow-views" in again.parts and again != first
    lease.release()


def test_a_linked_views_or_damaged_directory_is_never_followed(sandbox):
    store, outside = sandbox
    (outside / "victim_dir").mkdir()
    (outside / "victim_dir" / "keep.txt").write_text("x")
    (store / ".rlarrow-views").symlink_to(outside, target_is_directory=True)
    before = listing(outside)
    rlarrow.Store.open(store).close()  # the sweep does not follow the link
    assert rlarrow.sql(store, "select count(*) as n from scalars").column("n").to_pylist() == [10]
    assert listing(outside) == before
    (store / "_damaged").symlink_to(outside, target_is_directory=True)
    victim = rlarrow.Store.open(store, readonly=True).files("episodes")[0]
    victim.write_bytes(victim.read_bytes()[:-40])
    with pytest.raises(CorruptFileError, match="_damaged"):
        rlarrow.Store.open(store).repair(apply=True)
    assert listing(outside) == before


def test_repair_finishes_an_interrupted_compaction_before_dropping(populated):
    path = populated.path
    for i in range(3):
        populated.append("scalars", {"run_id": "r", "scope": "t", "tag": "x", "step": [i], "value": [1.0]})
    names = [p.name for p in populated.files("scalars")]
    merged = populated.read("scalars")
    new = "part-29990101T000000000000-00c0ffee.parquet"
    import pyarrow.parquet as pq

    pq.write_table(merged, path / "scalars" / new)  # a compaction killed after its rename
    edit(path, lambda m: m.update(pending={"op": "compact", "table": "scalars", "old": names, "new": [new],
                                           "new_entries": [{"name": new, "rows": 13, "bytes": 1}]}))
    victim = populated.files("episodes")[0]
    victim.write_bytes(victim.read_bytes()[:-40])
    run_cli("repair", str(path), "--apply")
    assert rlarrow.Store.open(path).row_count("scalars") == 13  # not 26


def test_a_missing_file_fails_only_queries_of_its_table_and_fast(populated):
    import time

    populated.files("scalars")[0].unlink()
    started = time.perf_counter()
    assert rlarrow.Store.open(populated.path, readonly=True).row_count("steps") == 18
    assert rlarrow.sql(populated.path, "select count(*) as n from steps").column("n").to_pylist() == [18]
    assert time.perf_counter() - started < 5
    with pytest.raises(RLArrowError, match="rlarrow info|repair"):
        rlarrow.sql(populated.path, "select count(*) from scalars")


def test_a_failed_auto_compaction_does_not_undo_the_commit(populated, monkeypatch):
    import numpy as np

    from rlarrow.core.errors import RLArrowWarning, StoreError

    def fail(*args, **kwargs):
        raise StoreError("disk full while compacting")

    populated.auto_compact = 0
    monkeypatch.setattr(rlarrow.Store, "compact", fail)
    with pytest.warns(RLArrowWarning, match="succeeded"):
        populated.append("scalars", {"run_id": "r", "scope": "t", "tag": "x", "step": np.arange(3),
                                     "value": np.zeros(3)})
    assert rlarrow.Store.open(populated.path, readonly=True).row_count("scalars") == 13


def test_a_group_shared_store_opens_for_writing_by_default(populated):
    import numpy as np

    for p in (populated.path / MANIFEST_NAME, populated.path / ".rlarrow.lock"):
        os.chmod(p, 0o444)  # another user's files, in a directory we may write
    try:
        s = rlarrow.Store.open(populated.path)
        assert not s.readonly
        s.append("scalars", {"run_id": "r", "scope": "t", "tag": "x", "step": np.arange(2),
                             "value": np.zeros(2)})
    finally:
        os.chmod(populated.path / ".rlarrow.lock", 0o644)


def test_unplain_names_in_a_table_are_not_adopted(populated):
    import pyarrow.parquet as pq

    copy = populated.path / "scalars" / "part-0 (copy).parquet"
    pq.write_table(pq.read_table(populated.files("scalars")[0]), copy)
    s = rlarrow.Store.open(populated.path)
    assert s.row_count("scalars") == 10 and copy.exists()
    rlarrow.Store.open(populated.path).close()  # and the store still opens


def test_readers_do_not_count_a_commit_in_flight(populated):
    """A file renamed into place but not yet listed is shown only once no writer holds the lock."""
    import pyarrow.parquet as pq

    flight = populated.path / "scalars" / "part-29990101T000000000000-0f11e0f1.parquet"
    writer = rlarrow.Store.open(populated.path)
    with writer._locked():  # a writer between its rename and its manifest write
        pq.write_table(populated.read("scalars"), flight)
        assert rlarrow.Store.open(populated.path, readonly=True).row_count("scalars") == 10
        counted = rlarrow.sql(populated.path, "select count(*) as n from scalars")
        assert counted.column("n").to_pylist() == [10]
    # no writer now: a file a killed writer renamed but never listed is whole, and is shown
    assert rlarrow.Store.open(populated.path, readonly=True).row_count("scalars") == 20


def test_scan_frames_and_their_derived_frames_read_through_a_compaction(populated):
    import polars as pl

    for i in range(3):
        populated.append("scalars", {"run_id": "r", "scope": "t", "tag": "x", "step": [i],
                                     "value": [1.0]})
    frame = rlarrow.scan(populated.path, "scalars").filter(pl.col("tag") == "x").select("step")
    populated.compact("scalars")
    assert sorted(frame.collect()["step"].to_list()) == [0, 1, 2]
