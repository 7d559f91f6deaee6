"""A writer killed by SIGKILL at any moment leaves a readable store with every earlier commit."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import duckdb
import pytest
from conftest import assert_delta_current
from forking import ForkServer

import rlarrow

ROWS_PER_COMMIT = 50
#: what the children and ``rlarrow info`` import (some only when first used): the fork server's imports
MODULES = ["numpy", "pyarrow.dataset", "pyarrow.pandas_compat", "rlarrow.core.store.files",
           "rlarrow.core.schema",
           "rlarrow.core.step_stats", "rlarrow.cli.commands"]

CHILD = r"""
import sys, numpy as np, rlarrow, rlarrow.core.store.files
rlarrow.core.store.files.ROW_GROUP_BYTES = 256  # so that a 50-row append is written as 3 files in parallel
store = rlarrow.Store.open(sys.argv[1], auto_compact=4)
start = int(sys.argv[2])
print("ready", flush=True)
seq = start
steps_writer = store.writer("steps", flush_rows=40)
while True:
    k = np.arange(seq * 50, (seq + 1) * 50)
    rows = rlarrow.core.schema.build("scalars", {"run_id": "kill", "scope": "train", "tag": "seq", "step": k,
                                            "value": np.full(50, float(seq))})
    info = store.append("scalars", rows, threads=3 if seq % 2 else 1)  # odd: 3 files, one commit
    assert len(info.files) == (3 if seq % 2 else 0), info
    print(seq, flush=True)
    steps_writer.write({"run_id": "kill", "episode_id": seq, "step": np.arange(10), "env_index": 0,
                        "observation": np.random.rand(10, 16).astype(np.float32),
                        "is_first": [True] + [False] * 9, "is_last": [False] * 9 + [True],
                        "is_terminal": [False] * 10})
    seq += 1
"""


def kill_loop(tmp_path, kills: int, seed: int) -> None:
    """SIGKILL a writer ``kills`` times, each a child forked from one server (tests/forking.py)."""
    with ForkServer(MODULES) as server:
        _kill_loop(server, tmp_path, kills, seed)


def _kill_loop(server: ForkServer, tmp_path, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "store"
    rlarrow.Store.create(path)
    committed: set[int] = set()
    next_seq = 0
    for _ in range(kills):
        child = server.start(CHILD, str(path), str(next_seq))
        child.wait_ready()
        time.sleep(rng.uniform(0.0, 0.4))
        printed = [int(word) for word in child.kill() if word.isdigit()]
        committed.update(printed)

        # Readers first (no recovery has run yet): what they see is complete commits only.
        ro = rlarrow.Store.open(path, readonly=True)
        check_complete(ro, committed)
        # `rlarrow info` works on the store as the kill left it.
        server.info_works(path)
        # A writer's recovery, then every engine agrees with the manifest.
        store = rlarrow.Store.open(path)
        seqs = check_complete(store, committed)
        assert_delta_current(store)  # the Delta log caught up with the manifest, in row order
        store.vacuum(retain_hours=0)  # (files compactions replaced stay for time travel till then)
        glob = f"{path}/scalars/*.parquet"
        # a kill before the first commit leaves no file, and DuckDB refuses an empty glob
        files = list((path / "scalars").glob("*.parquet"))
        n = duckdb.sql(f"select count(*) from read_parquet('{glob}')").fetchall()[0][0] if files else 0
        assert n == store.row_count("scalars") == ROWS_PER_COMMIT * len(seqs)
        looked = [*(path / "scalars").iterdir(), *(path / "scalars" / "_delta_log").glob("*")]
        leftovers = [p.name for p in looked if p.name.startswith(".tmp-")]
        assert leftovers == []
        next_seq = max(seqs, default=-1) + 1


def check_complete(store: rlarrow.Store, committed: set[int]) -> set[int]:
    values = store.read("scalars", columns=["value"]).column("value").to_pylist()
    counts = Counter(int(v) for v in values)
    assert all(c == ROWS_PER_COMMIT for c in counts.values()), "a commit is partial or duplicated"
    assert committed <= set(counts), f"lost commits: {sorted(committed - set(counts))}"
    steps = store.read("steps", columns=["episode_id"]).column("episode_id").to_pylist()
    assert all(c == 10 for c in Counter(steps).values()), "a steps commit is partial or duplicated"
    return set(counts)


def test_sigkill_leaves_every_commit(tmp_path):
    kill_loop(tmp_path, kills=6, seed=1)


@pytest.mark.slow
def test_sigkill_many_times(tmp_path):
    kill_loop(tmp_path, kills=60, seed=2)


IMPORT_CHILD = r"""
import sys
from pathlib import Path
import rlarrow
from rlarrow.io.hdf5 import import_hdf5
from rlarrow.io.minari import import_minari
from rlarrow.io.rlds import import_rlds
from rlarrow.io.lerobot import import_lerobot
fixtures = Path(sys.argv[2])
sources = [fixtures / "hdf5" / "d4rl_mujoco.hdf5", fixtures / "hdf5" / "robomimic_d4rl.hdf5",
           fixtures / "minari" / "cartpole" / "hdf5-v0", fixtures / "rlds" / "robot",
           fixtures / "lerobot" / "pusht_v30"]
store = rlarrow.Store.open(sys.argv[1])
print("ready", flush=True)
seq = int(sys.argv[3])
while True:
    src = sources[seq % 5]
    if src.name == "robot":
        import_rlds(src, store, run_id=f"k{seq}", progress=False)
    elif src.name == "pusht_v30":  # every other time with its camera kept as video (videos rows)
        import_lerobot(src, store, run_id=f"k{seq}", progress=False,
                       video="keep" if (seq // 5) % 2 else "decode")
    elif src.is_dir():
        import_minari(src, store, run_id=f"k{seq}", progress=False)
    else:  # small chunks: many writer flushes inside one import
        import_hdf5(src, store, run_id=f"k{seq}", progress=False, chunk_bytes=600)
    print(seq, flush=True)
    seq += 1
"""


def _missing_importers() -> list[str]:
    import importlib.util

    return [m for m in ("h5py", "google.protobuf", "av") if importlib.util.find_spec(m) is None]


NEEDS_IMPORTERS = pytest.mark.skipif(bool(_missing_importers()), reason=(
    f"the HDF5, RLDS and LeRobot importers need {_missing_importers()}: "
    "pip install 'rlarrow[hdf5,rlds,video]'"))


#: what the importers load (some only when first used): the fork server's imports
IMPORT_MODULES = [*MODULES, "h5py", "av", "PIL.Image", "google.protobuf.descriptor_pb2",
                  "google.protobuf.text_format", "datasketches", "rlarrow.io.hdf5", "rlarrow.io.minari",
                  "rlarrow.io.rlds", "rlarrow.io.lerobot"]


def _import_kill_loop(tmp_path, kills: int, seed: int) -> None:
    """Kill importers of five real formats at random moments: every run is whole or absent.

    The importers are forked from one server that imported them (tests/forking.py)."""
    with ForkServer(IMPORT_MODULES) as server:
        _import_kills(server, tmp_path, kills, seed)


def _import_kills(server: ForkServer, tmp_path, kills: int, seed: int) -> None:
    from conftest import FIXTURES

    from rlarrow.io.hdf5 import import_hdf5
    from rlarrow.io.lerobot import import_lerobot
    from rlarrow.io.minari import import_minari
    from rlarrow.io.rlds import import_rlds

    # what each source imports, whole
    sizes = []
    hdf5 = FIXTURES / "hdf5"
    for k, src in enumerate([hdf5 / "d4rl_mujoco.hdf5", hdf5 / "robomimic_d4rl.hdf5",
                             FIXTURES / "minari" / "cartpole" / "hdf5-v0", FIXTURES / "rlds" / "robot",
                             FIXTURES / "lerobot" / "pusht_v30"]):
        ref = tmp_path / f"ref{k}"
        importer = {"robot": import_rlds, "pusht_v30": import_lerobot}.get(
            src.name, import_minari if src.is_dir() else import_hdf5)
        report = importer(src, ref, progress=False)
        sizes.append((report.steps, report.episodes))
    rng = random.Random(seed)
    path = tmp_path / "store"
    rlarrow.Store.create(path)
    committed: set[int] = set()
    seq = 0
    for _ in range(kills):
        child = server.start(IMPORT_CHILD, str(path), str(FIXTURES), str(seq))
        child.wait_ready()
        if rng.random() < 0.5:  # let an import finish first, then kill inside the next
            committed.add(int(child.readline()))
        time.sleep(rng.uniform(0.0, 0.6))
        committed.update(int(x) for x in child.kill() if x.isdigit())
        for readonly in (True, False):  # a reader before recovery, then a writer's recovery
            with rlarrow.Store.open(path, readonly=readonly) as st:
                runs = st.read("runs", columns=["run_id"]).column("run_id").to_pylist()
                assert {f"k{s}" for s in committed} <= set(runs), "an import that finished was lost"
                steps = Counter(st.read("steps", columns=["run_id"]).column("run_id").to_pylist())
                episodes = Counter(st.read("episodes", columns=["run_id"]).column("run_id").to_pylist())
                videos = Counter(st.read("videos", columns=["run_id"]).column("run_id").to_pylist())
                for run in runs:  # every run whole: all its steps and episodes, or no run at all
                    assert (steps[run], episodes[run]) == sizes[int(run[1:]) % 5], run
                    kept = int(run[1:]) % 5 == 4 and (int(run[1:]) // 5) % 2 == 1
                    assert videos[run] == (3 if kept else 0), run  # its streams with it, or none
                assert set(steps) | set(episodes) | set(videos) <= set(runs), \
                    "rows of a run that is not there"
        seq = max([int(r[1:]) for r in runs], default=-1) + 1
    assert committed, "no import finished between kills: the loop tested nothing"


@NEEDS_IMPORTERS
def test_sigkill_during_imports_leaves_whole_runs(tmp_path):
    _import_kill_loop(tmp_path, kills=8, seed=3)


@pytest.mark.slow
@NEEDS_IMPORTERS
def test_sigkill_during_imports_many_times(tmp_path):
    _import_kill_loop(tmp_path, kills=40, seed=4)


#: the exports the kill loop interrupts: the native writers (Riegeli, HDF5 in a child) first
KILLED_EXPORTS = ["envlogger", "minari", "robomimic", "rlds", "lerobot", "pt"]


EXPORT_CHILD = r"""
import sys
from rlarrow.cli.commands import main
print("ready", flush=True)
main(sys.argv[1:])
"""
#: what the exports load (some only when first used): the fork server's imports
EXPORT_MODULES = [*IMPORT_MODULES, "rlarrow.io.minari.minari_writing", "rlarrow.io.hdf5.robomimic_writing"]


def _export_kill_loop(tmp_path, formats: list[str], kills: int, seed: int) -> None:
    """SIGKILL ``rlarrow export`` at a random moment: its target is absent or a complete export.

    The exports are forked from one server that imported rlarrow (tests/forking.py); those
    that write HDF5 start their own child interpreter, as they do for a user."""
    with ForkServer(EXPORT_MODULES) as server:
        _export_kills(server, tmp_path, formats, kills, seed)


def _export_kills(server: ForkServer, tmp_path, formats: list[str], kills: int, seed: int) -> None:
    import warnings

    from conftest import FIXTURES
    from test_full_disk import _reimported

    from rlarrow.io.importing import import_paths

    store = tmp_path / "store"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import_paths([FIXTURES / "minari" / "cartpole" / "hdf5-v0"], store, progress=False, run_id="minari")
        import_paths([FIXTURES / "skrl" / "wrapped" / "memories"], store, progress=False, run_id="skrl")

    def export(fmt: str, out: Path) -> tuple[list[str], list[str]]:
        target = os.fspath(out / "demo.hdf5") if fmt == "robomimic" else os.fspath(out)
        run = "skrl" if fmt == "pt" else "minari"
        args = ["export", "STORE", "-o", "OUT/demo.hdf5" if fmt == "robomimic" else "OUT", "--format", fmt]
        return [sys.executable, "-m", "rlarrow", "export", os.fspath(store), "-o", target, "--format", fmt,
                "--run-id", run], args

    def target_of(fmt: str, out: Path) -> Path:
        return out / "demo.hdf5" if fmt == "robomimic" else out / "memories" if fmt == "pt" else out

    def writing(target: Path) -> bool:
        """Whether the export's temporary file or directory (beside its target) is there yet."""
        try:
            return any(p.name.startswith((f".{target.name}.rlarrow-new", ".rlarrow-tmp-"))
                       for p in target.parent.iterdir())
        except FileNotFoundError:
            return False

    references = {}
    for fmt in formats:  # each export whole
        command, args = export(fmt, tmp_path / f"ref-{fmt}")
        subprocess.run(command, check=True, capture_output=True)
        references[fmt] = _reimported(tmp_path / f"ref-{fmt}", args, tmp_path)
    rng = random.Random(seed)
    outcomes: Counter[str] = Counter()
    for k in range(kills):
        fmt = formats[k % len(formats)]
        out = tmp_path / f"out{k}"
        command, args = export(fmt, out)
        target = target_of(fmt, out)
        child = server.start(EXPORT_CHILD, *command[3:])  # (`rlarrow export ...`, forked)
        child.wait_ready()
        deadline = time.monotonic() + 120
        while not child.ended() and not writing(target) and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.8))  # once it writes: at any moment of the write, or after it
        child.kill()  # (a child that finished waits for it)
        if target.exists():  # complete: it imports back as the uninterrupted export did
            assert _reimported(out, args, tmp_path) == references[fmt], f"{fmt}: a partial export"
            outcomes["complete"] += 1
        else:
            outcomes["absent"] += 1
        left = [p.name for p in target.parent.iterdir() if p.name.startswith(target.name) and p != target]
        assert left == [], f"{fmt}: left {left} beside the target"  # (hidden temporaries may stay)
    assert outcomes["absent"], "every export finished before its kill: the loop tested nothing"
    # the hidden temporaries the kills left are removed by the next export beside them, once their
    # process is gone and they are an hour old
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    recent = tmp_path / f".out.rlarrow-new-{gone}-0123abcd"
    (tmp_path / f".rlarrow-tmp-{gone}-4567abcd").mkdir()  # (one for sure, of a dead process)
    old = [p for p in tmp_path.iterdir() if ".rlarrow-new-" in p.name or p.name.startswith(".rlarrow-tmp-")]
    recent.mkdir()
    hour_ago = time.time() - 2 * 3600
    for p in old:
        os.utime(p, (hour_ago, hour_ago))
    command, _ = export("minari", tmp_path / "after")
    subprocess.run(command, check=True, capture_output=True)
    assert [p.name for p in old if p.exists()] == [] and recent.exists()  # (a recent one may be writing)


def test_sigkill_during_exports_leaves_no_target_or_a_complete_one(tmp_path):
    _export_kill_loop(tmp_path, ["envlogger", "minari", "robomimic"], kills=3, seed=5)


@pytest.mark.slow
def test_sigkill_during_exports_many_times(tmp_path):
    _export_kill_loop(tmp_path, KILLED_EXPORTS, kills=30, seed=6)
