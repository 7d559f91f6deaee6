"""Nothing read or written outside the store through the store's own entries (issue 36).

A store's lock file, manifest, ``_damaged/``, ``.rlarrow-retired/``, reader views, manifest
segments, Delta log and data files may each arrive as a symbolic link into a *canary*
directory outside the store (a downloaded, merged or planted store). Every ``rlarrow``
command that touches the store runs under ``strace`` (tests/hostile.py) and must either work
without following the link or refuse with an rlarrow error that names the entry; no system
call may reach the canary and its files keep their bytes. The same is checked through the
Python API, without strace.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO, populate
from hostile import needs_strace, traced, traced_many

import rlarrow
from rlarrow.core.store.repair import rebuild_manifest

VICTIM = b"outside the store: not to be read or written " * 4
NPZ = REPO / "tests/fixtures/skrl/partial/memories/26-11-22_13-53-58-644856_memory_0x7fc63c2dcdd0.npz"


def _swap_file(entry: Path, canary: Path) -> None:
    """Replace the store's file ``entry`` by a link to a copy of it outside (the manifest) or a victim."""
    target = canary / "victim"
    if entry.name == "_rlarrow_store.json" or entry.suffix in (".json", ".parquet"):
        shutil.copy(entry, target)  # (a link to a plausible copy: following it would "work")
    os.remove(entry)
    os.symlink(target, entry)


def _plant_lock(s: Path, c: Path) -> str:
    _swap_file(s / ".rlarrow.lock", c)
    return r"\.rlarrow\.lock"


def _plant_manifest(s: Path, c: Path) -> str:
    _swap_file(s / "_rlarrow_store.json", c)
    return r"_rlarrow_store\.json"


def _plant_damaged(s: Path, c: Path) -> str:
    os.symlink(c, s / "_damaged")
    return "_damaged"


def _plant_damaged_table(s: Path, c: Path) -> str:
    """``_damaged/steps`` leads outside and a steps file is damaged: repair --apply would move it out."""
    (s / "_damaged").mkdir()
    os.symlink(c, s / "_damaged" / "steps")
    part = sorted((s / "steps").glob("part-*.parquet"))[0]
    part.write_bytes(part.read_bytes()[:100])
    return f"_damaged|{part.name}"  # (a refusal names the link or the damaged file)


def _plant_retired(s: Path, c: Path) -> str:
    """The replaced files kept aside, moved outside behind a link (vacuum would delete them there)."""
    shutil.move(s / ".rlarrow-retired", c / "retired")
    os.symlink(c / "retired", s / ".rlarrow-retired")
    return r"\.rlarrow-retired"


def _plant_views(s: Path, c: Path) -> str:
    os.symlink(c, s / ".rlarrow-views")
    return r"\.rlarrow-views"


def _plant_delta_log(s: Path, c: Path) -> str:
    log = s / "steps" / "_delta_log"
    shutil.copytree(log, c / "log")
    shutil.rmtree(log)
    os.symlink(c / "log", log)
    return "_delta_log"


def _plant_delta_entry(s: Path, c: Path) -> str:
    _swap_file(sorted((s / "steps" / "_delta_log").glob("0*.json"))[-1], c)
    return "_delta_log"


def _plant_data_file(s: Path, c: Path) -> str:
    part = sorted((s / "steps").glob("part-*.parquet"))[0]
    _swap_file(part, c)
    return part.name


def _plant_table_dir(s: Path, c: Path) -> str:
    shutil.move(s / "episodes", c / "episodes")
    os.symlink(c / "episodes", s / "episodes")
    return "episodes"


def _plant_orphan(s: Path, c: Path) -> str:
    """An unlisted data file that is a link (a writer's recovery adopts unlisted files it finds)."""
    shutil.copy(sorted((s / "steps").glob("part-*.parquet"))[0], c / "victim")
    os.symlink(c / "victim", s / "steps" / "part-20990101T000000000000-00000000.parquet")
    return "part-20990101T000000000000-00000000"


def _plant_view_entry(s: Path, c: Path) -> str:
    """A dead reader's view directory whose lock file and table folder lead outside (writers sweep views)."""
    dead = s / ".rlarrow-views" / "host-1-deadbeef"
    dead.mkdir(parents=True)
    os.symlink(c / "victim", dead / ".held")
    os.symlink(c, dead / "steps")
    return r"\.rlarrow-views"


PLANTS: dict[str, Callable[[Path, Path], str]] = {
    "lock": _plant_lock, "manifest": _plant_manifest, "damaged": _plant_damaged,
    "damaged_table": _plant_damaged_table, "retired": _plant_retired, "views": _plant_views,
    "delta_log": _plant_delta_log, "delta_entry": _plant_delta_entry, "data_file": _plant_data_file,
    "table_dir": _plant_table_dir, "orphan": _plant_orphan, "view_entry": _plant_view_entry,
}

#: every store command of the CLI that touches an existing store (RUN: the store's run)
COMMANDS: dict[str, list[str]] = {
    "convert": ["convert", str(NPZ), "-o", "STORE"],
    "check": ["check", "STORE"],
    "info": ["info", "STORE"],
    "history": ["history", "STORE"],
    "repair": ["repair", "STORE"],
    "repair_apply": ["repair", "STORE", "--apply"],
    "compact": ["compact", "STORE"],
    "vacuum": ["vacuum", "STORE", "--retain-hours", "0"],
    "sql": ["sql", "STORE", "SELECT count(*) AS n FROM steps"],
    "export": ["export", "STORE", "-o", "OUT", "--format", "npz"],
    "delete": ["delete", "STORE", "--run", "RUN"],
    "label": ["label", "STORE", "--run", "RUN", "--set", "success=true"],
    "stats": ["stats", "STORE"],
    "push": ["push", "STORE", "OUT"],
    "merge_into": ["merge", "STORE", "OTHER"],
    "merge_from": ["merge", "OTHER", "STORE"],
    "migrate": ["migrate", "STORE"],
    "plot": ["plot", "STORE", "--tag", "train/loss", "-o", "OUT.png"],
}

#: the cases the issue names, run in the quick suite; the whole matrix is marked slow
QUICK = {("lock", "convert"), ("lock", "compact"), ("lock", "sql"), ("lock", "repair_apply"),
         ("damaged_table", "repair_apply"), ("damaged", "repair_apply"), ("manifest", "info"),
         ("manifest", "repair_apply"), ("retired", "compact"), ("data_file", "sql"), ("data_file", "push")}


_PRISTINE: dict[str, tuple[Path, str]] = {}


def _pristine() -> tuple[Path, str]:
    """A populated store (and its run), made once per process: every case plants into a copy of it.

    (Populating a store took ~0.2 s of CPU, and the slow matrix makes 216 of them; the store holds
    no path of its own, so a copy is what populating it again would make.)
    """
    if not _PRISTINE:
        root = Path(tempfile.mkdtemp(prefix="rlarrow-hostile-links-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        with rlarrow.Store.create(root / "store") as s:
            run = populate(s, episodes=3, length=4)
            s.compact(["stats"])  # (a retired file, for vacuum and the retired directory)
        _PRISTINE["store"] = (root / "store", run)
    return _PRISTINE["store"]


def _make(tmp_path: Path, plant: str) -> tuple[Path, Path, str, str, dict[str, bytes]]:
    """A populated store with ``plant`` planted: the store, canary, run, entry and the canary's bytes."""
    canary = tmp_path / "outside"
    canary.mkdir()
    (canary / "victim").write_bytes(VICTIM)
    pristine, run = _pristine()
    shutil.copytree(pristine, tmp_path / "store", symlinks=True)
    entry = PLANTS[plant](tmp_path / "store", canary)
    return tmp_path / "store", canary, run, entry, _bytes(canary)


def _bytes(canary: Path) -> dict[str, bytes]:
    return {os.fspath(p.relative_to(canary)): p.read_bytes()
            for p in sorted(canary.rglob("*")) if p.is_file()}


def _names(tmp_path: Path, store: Path, run: str, command: str) -> list[str]:
    """``command``'s arguments for ``store`` (and, for merges, another store made beside it)."""
    names = {"STORE": str(store), "OUT": str(tmp_path / "out"), "OUT.png": str(tmp_path / "plot.png"),
             "RUN": run, "OTHER": str(tmp_path / "other")}
    if "OTHER" in COMMANDS[command]:
        with rlarrow.Store.create(tmp_path / "other") as other:
            populate(other, episodes=1, length=2)
    return [names.get(a, a) for a in COMMANDS[command]]


def _judge(returncode: int, stderr: str, touched: list[str], entry: str) -> None:
    """Nothing reached outside; a refusal is an rlarrow error naming the planted entry."""
    assert not touched, (stderr, touched[:5])
    assert "Traceback" not in stderr and "unexpected" not in stderr, stderr
    if returncode != 0:
        assert "Error:" in stderr and re.search(entry, stderr), stderr


ENV = {**os.environ, "PYTHONPATH": str(REPO), "RLARROW_DEBUG": ""}


@needs_strace
@pytest.mark.parametrize(("plant", "command"), sorted(QUICK), ids=[f"{p}-{c}" for p, c in sorted(QUICK)])
def test_no_command_reaches_outside_through_a_store_entry(tmp_path, plant, command):
    store, canary, run, entry, before = _make(tmp_path, plant)
    done, touched = traced(_names(tmp_path, store, run, command), canary=canary, cwd=tmp_path, env=ENV)
    assert _bytes(canary) == before, done.stderr
    _judge(done.returncode, done.stderr, touched, entry)


@needs_strace
@pytest.mark.slow
@pytest.mark.parametrize("plant", list(PLANTS))
def test_no_command_of_the_cli_reaches_outside_through_a_planted_entry(tmp_path, plant):
    # every command of COMMANDS on its own copy of the planted store, one traced process for all
    # (tests/hostile.py's traced_many: the interpreter's start is most of a traced command's time)
    cases, befores, entries = [], [], []
    for command in COMMANDS:
        here = tmp_path / command
        here.mkdir()
        store, canary, run, entry, before = _make(here, plant)
        cases.append(_names(here, store, run, command))
        befores.append((canary, before))
        entries.append(entry)
    results = traced_many(cases, canaries=[c for c, _ in befores], cwd=tmp_path, env=ENV)
    for command, (code, stderr, touched), (canary, before), entry in zip(COMMANDS, results, befores, entries,
                                                                          strict=True):
        assert _bytes(canary) == before, (command, stderr)
        _judge(code, stderr, touched, entry)


# ----------------------------------------------------------------------- the Python API


@pytest.fixture
def planted(tmp_path):
    def make(plant: str) -> tuple[Path, Path, dict[str, bytes]]:
        store, canary, _, _, before = _make(tmp_path, plant)
        return store, canary, before
    return make


def test_a_lock_that_is_a_link_is_refused_and_its_target_keeps_its_bytes(planted):
    store, canary, before = planted("lock")
    with pytest.raises(rlarrow.CorruptFileError, match=r"\.rlarrow\.lock.*symbolic link.*rm "):
        rlarrow.Store.open(store)
    with rlarrow.Store.open(store, readonly=True) as s:  # readers take no lock: they read on
        assert s.row_count("steps") == 15
    assert _bytes(canary) == before
    os.remove(store / ".rlarrow.lock")  # the fix the message gives
    with rlarrow.Store.open(store) as s:
        s.append("scalars", {"run_id": "r", "scope": "train", "tag": "x", "step": [0], "value": [1.0]})
    assert (store / ".rlarrow.lock").is_file() and not (store / ".rlarrow.lock").is_symlink()
    assert _bytes(canary) == before


def test_a_manifest_that_is_a_link_is_not_read_and_repair_rebuilds_it_in_place(planted):
    store, canary, before = planted("manifest")
    for readonly in (True, False):
        with pytest.raises(rlarrow.CorruptFileError, match=r"_rlarrow_store\.json.*symbolic link"):
            rlarrow.Store.open(store, readonly=readonly)
    report = rebuild_manifest(store, apply=True)  # (what `rlarrow repair --apply` runs first)
    assert "symbolic link" in report[0] and "rebuilt" in report[0]
    assert not (store / "_rlarrow_store.json").is_symlink()
    assert any(p.is_symlink() for p in (store / "_damaged").iterdir())  # the link, set aside
    with rlarrow.Store.open(store) as s:
        assert s.row_count("steps") == 15
    assert _bytes(canary) == before


def test_repair_never_moves_a_damaged_file_through_a_linked_damaged_directory(planted):
    store, canary, before = planted("damaged_table")
    with rlarrow.Store.open(store) as s:
        assert s.repair().problems
        with pytest.raises(rlarrow.CorruptFileError, match=r"_damaged/steps.*symbolic link"):
            s.repair(apply=True)
        assert len(list((store / "steps").glob("part-*.parquet"))) == 3  # nothing moved
    assert _bytes(canary) == before
    os.remove(store / "_damaged" / "steps")  # the fix the message gives
    with rlarrow.Store.open(store) as s:
        assert s.repair(apply=True).applied
        assert [p.name for p in (store / "_damaged" / "steps").iterdir()]  # set aside inside the store


def test_info_counts_no_bytes_through_a_link(planted):
    store, canary, _ = planted("views")
    with rlarrow.Store.open(store, readonly=True) as s:
        plain = s.info().bytes_on_disk
    (canary / "big").write_bytes(b"x" * 1_000_000)
    os.symlink(canary / "big", store / "steps" / "big")
    os.symlink(canary, store / "_damaged")
    with rlarrow.Store.open(store, readonly=True) as s:
        assert s.info().bytes_on_disk == plain


def test_a_linked_retired_directory_keeps_replaced_files_in_the_store(planted):
    store, canary, before = planted("retired")
    with rlarrow.Store.open(store) as s:
        assert s.compact(["steps"])  # works: the replaced files stay where they were
        assert s.row_count("steps") == 15
        assert s.vacuum(retain_hours=0) is not None
    assert _bytes(canary) == before and (store / ".rlarrow-retired").is_symlink()


def test_a_data_file_that_is_a_link_is_refused_by_readers(planted):
    store, canary, before = planted("data_file")
    with rlarrow.Store.open(store, readonly=True) as s:
        with pytest.raises(rlarrow.CorruptFileError, match="symbolic link"):
            s.read("steps")
    with pytest.raises(rlarrow.CorruptFileError, match="symbolic link"):
        rlarrow.sql(store, "SELECT count(*) FROM steps")
    assert _bytes(canary) == before


def test_rebuilding_a_lost_manifest_reads_no_data_file_through_a_link(planted):
    store, canary, before = planted("data_file")
    os.remove(store / "_rlarrow_store.json")
    with pytest.raises(rlarrow.CorruptFileError, match=r"part-.*\.parquet.*symbolic link"):
        rebuild_manifest(store, apply=True)
    assert not (store / "_rlarrow_store.json").exists()  # nothing written from a half view
    assert _bytes(canary) == before


def test_time_travel_never_reads_a_file_or_log_entry_through_a_link(planted):
    store, canary, before = planted("delta_entry")
    with rlarrow.Store.open(store, readonly=True) as s:
        version = s.version
    with pytest.raises(rlarrow.RLArrowError, match=r"_delta_log"):
        rlarrow.Store.open(store, version=version - 1).read("steps")
    assert _bytes(canary) == before


@needs_strace
@pytest.mark.parametrize("plant", ["delta_log", "delta_entry", "data_file", "table_dir"])
@pytest.mark.parametrize("command", ["info", "repair_apply"])
def test_a_store_that_lost_its_manifest_is_rebuilt_from_nothing_outside(tmp_path, plant, command):
    store, canary, _, entry, before = _make(tmp_path, plant)
    os.remove(store / "_rlarrow_store.json")
    done, touched = traced([{"STORE": str(store)}.get(a, a) for a in COMMANDS[command]], canary=canary,
                           cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "RLARROW_DEBUG": ""})
    assert not touched, (done.stderr, touched[:5])
    assert _bytes(canary) == before
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr, done.stderr
    if done.returncode != 0:
        assert "Error:" in done.stderr, done.stderr
    else:  # rebuilt from what is inside: it opens, and no link was taken in
        with rlarrow.Store.open(store, readonly=True) as s:
            assert s.row_count("steps") >= 10 and not (store / "_rlarrow_store.json").is_symlink()
            assert s.read("steps").num_rows == s.row_count("steps")  # (a listed link would be refused)
