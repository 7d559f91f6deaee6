"""A store whose manifest is lost or damaged: `rlarrow repair --apply` rebuilds it from the Delta logs.

A real store (several tables, a second steps layout, appends, a delete, a compaction, so
several versions and replaced files) loses its manifest, or has it cut short; `rlarrow repair
STORE --apply` rebuilds it and every table reads the same rows as before, earlier versions
read as before, and the store takes commits again. What cannot be rebuilt is said exactly.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rlarrow
from rlarrow.core.store.repair import rebuild_manifest


def steps(run: str, episode: int, dim: int = 3) -> dict[str, object]:
    rng = np.random.default_rng(episode)
    return {"run_id": run, "episode_id": episode, "step": np.arange(4), "env_index": 0,
            "observation": rng.random((4, dim)).astype(np.float32), "action": [0, 1, 1, None],
            "reward": [1.0, 0.5, 2.0, None], "discount": [1.0, 1.0, 0.0, None],
            "is_first": [True, False, False, False], "is_last": [False, False, False, True],
            "is_terminal": [False, False, False, True]}


def make_store(path: Path) -> rlarrow.Store:
    store = rlarrow.Store.create(path)
    run = store.add_run(source="user", name="a", run_id="a")
    for episode in range(4):
        with store.transaction() as tx:
            tx.append("steps", steps(run, episode))
            tx.append("episodes", {"run_id": run, "episode_id": episode, "env_index": 0, "num_steps": 4,
                                   "return": 3.5, "terminated": True, "truncated": False,
                                   "partial_start": False, "partial_end": False})
        store.append("scalars", {"run_id": run, "scope": "train", "tag": "loss", "step": [episode],
                                 "value": [1.0 / (episode + 1)]})
    other = store.add_run(source="user", name="b", run_id="b")
    store.append("steps", steps(other, 0, dim=5))  # another shape: layout steps.2
    store.delete(runs=None, episodes=[("a", 1)])  # an edit: files replaced
    store.compact()
    return store


def contents(store: rlarrow.Store, version: int | None = None) -> dict[str, list[dict[str, object]]]:
    opened = store if version is None else rlarrow.Store.open(store.path, version=version)
    out = {}
    for info in opened.layouts("steps"):
        out[f"steps@{info.layout}"] = opened.read("steps", layout=info.layout).to_pylist()
    for table in ("runs", "episodes", "scalars", "stats"):
        out[table] = opened.read(table).to_pylist()
    return out


@pytest.mark.parametrize("damage", ["deleted", "cut short", "garbage"])
def test_repair_rebuilds_a_lost_manifest_from_the_delta_logs(tmp_path, damage):
    store = make_store(tmp_path / "s.rlarrow")
    before, version = contents(store), store.version
    earlier = {v: contents(store, v) for v in (2, version - 1)}
    assert len(before["steps@2"]) == 4 and len(before["episodes"]) == 3 and store.manifest()["retired"]
    store.close()
    manifest = tmp_path / "s.rlarrow" / "_rlarrow_store.json"
    if damage == "deleted":
        manifest.unlink()
    elif damage == "cut short":
        manifest.write_bytes(manifest.read_bytes()[: manifest.stat().st_size // 2])
    else:
        manifest.write_text('{"format": "rlarrow-store", "tables": 7}')
    with pytest.raises(rlarrow.RLArrowError, match="repair"):
        rlarrow.Store.open(tmp_path / "s.rlarrow")
    cli = [sys.executable, "-m", "rlarrow", "repair", str(tmp_path / "s.rlarrow")]
    dry = subprocess.run(cli, capture_output=True, text=True)
    assert dry.returncode == 0 and "would rebuild" in dry.stdout, dry.stderr
    assert not manifest.is_file() or damage != "deleted"  # a dry run writes nothing
    done = subprocess.run([*cli, "--apply"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "rebuilt it" in done.stdout and "steps.2: 1 file(s), 4 row(s)" in done.stdout
    store = rlarrow.Store.open(tmp_path / "s.rlarrow")
    assert contents(store) == before and store.version == version
    for v, rows in earlier.items():  # earlier versions read as before (replaced files kept)
        assert contents(store, v) == rows
    store.close()
    store = rlarrow.Store.open(tmp_path / "s.rlarrow", readonly=False)
    store.append("scalars", {"run_id": "a", "scope": "train", "tag": "loss", "step": [9], "value": [0.1]})
    assert store.row_count("scalars") == len(before["scalars"]) + 1 and store.version == version + 1
    if damage != "deleted":  # the damaged manifest is kept aside, not lost
        assert list((tmp_path / "s.rlarrow" / "_damaged").glob("_rlarrow_store.json-*"))
    assert rebuild_manifest(tmp_path / "s.rlarrow", apply=True) == []  # whole now: nothing to do


def test_what_cannot_be_rebuilt_is_said_exactly(tmp_path):
    store = make_store(tmp_path / "s.rlarrow")
    store.close()
    (tmp_path / "s.rlarrow" / "_rlarrow_store.json").unlink()
    shutil.rmtree(tmp_path / "s.rlarrow" / "scalars" / "_delta_log")
    with pytest.raises(rlarrow.CorruptFileError, match=r"scalars: holds \d+ Parquet file\(s\) but no Delta"):
        rebuild_manifest(tmp_path / "s.rlarrow", apply=True)
    assert not (tmp_path / "s.rlarrow" / "_rlarrow_store.json").exists()  # nothing written
    empty = tmp_path / "not-a-store"
    (empty / "steps").mkdir(parents=True)
    with pytest.raises(rlarrow.CorruptFileError, match="no table folder has a Delta log"):
        rebuild_manifest(empty, apply=True)
