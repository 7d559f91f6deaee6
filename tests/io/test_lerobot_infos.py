"""LeRobot's per-frame numbers as the typed ``infos`` column (steps 1.1), and stores of steps 1.0.

A LeRobot import keeps ``timestamp``, ``frame_index``, ``episode_index``, ``index``,
``task_index`` (and any other per-frame number) as the ``infos`` struct, in the dtypes the
dataset's ``info.json`` declares. Stores written by rlarrow with steps 1.0 kept them as each
step's JSON ``metadata``: the LeRobot export reads either, and gives the same dataset.
The data is the LeRobot fixture (``tests/fixtures/lerobot``, written by lerobot's own writer).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core import metadata
from rlarrow.core.sources import EpisodeChunk, EpisodeSource

HAVE_AV = importlib.util.find_spec("av") is not None
pytestmark = pytest.mark.skipif(
    not HAVE_AV, reason="LeRobot's cameras need PyAV: pip install 'rlarrow[video]'"
)
SRC = FIXTURES / "lerobot" / "pusht_v30"
DATA = SRC / "data" / "chunk-000" / "file-000.parquet"
KEYS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def frames(episode: int) -> pa.Table:
    """The fixture's own frames of ``episode`` (as lerobot wrote them), in frame order."""
    table = pq.read_table(DATA, columns=list(KEYS))
    return table.filter(pc.equal(table["episode_index"], episode)).sort_by("frame_index")


def as_written_by(steps: pa.Table, version: str) -> pa.Table:
    """An imported episode's steps with its frame numbers as steps ``version`` keeps them.

    "1.1": the typed ``infos`` struct; "1.0": each step's JSON ``metadata`` (``infos`` null),
    both made from the fixture's own frames, whatever the reader gave.
    """
    own = frames(int(steps["episode_id"][0].as_py()))
    n = own.num_rows
    assert steps.num_rows == n + 1
    rest = steps.drop_columns([c for c in ("infos", "metadata", "metadata_types") if c in steps.column_names])
    if version == "1.1":
        infos = pa.StructArray.from_arrays([own[k].combine_chunks() for k in KEYS], names=list(KEYS))
        return rest.append_column("infos", pa.concat_arrays([infos, pa.nulls(1, infos.type)]))
    texts, tags = metadata.encode_rows({k: own[k].to_numpy() for k in KEYS})
    return rest.append_column("metadata", pa.concat_arrays([texts, pa.nulls(1, pa.string())])).append_column(
        "metadata_types", pa.concat_arrays([tags, pa.nulls(1, pa.string())]))


def source_as(version: str) -> EpisodeSource:
    from rlarrow.io.lerobot import read_lerobot

    src = read_lerobot(SRC)

    def chunks(run: str):
        for chunk in src.with_run_id(run):
            yield EpisodeChunk(as_written_by(chunk.steps, version), chunk.episodes, chunk.tables)

    return EpisodeSource(src.run, {}, chunks, episodes=src.episodes_hint)


def written(out: Path) -> pa.Table:
    return pq.read_table(out / "data" / "chunk-000" / "file-000.parquet", columns=list(KEYS))


def test_the_export_reads_typed_infos_and_steps_1_0_metadata_alike(tmp_path):
    from rlarrow.io.lerobot import write_lerobot

    for version in ("1.1", "1.0"):
        write_lerobot(source_as(version), tmp_path / version, images="png", progress=False)
    typed, old = written(tmp_path / "1.1"), written(tmp_path / "1.0")
    own = pq.read_table(DATA, columns=list(KEYS)).sort_by([("episode_index", "ascending"),
                                                           ("frame_index", "ascending")])
    assert typed.equals(old)
    assert typed.schema == own.schema  # float32 timestamp, int64 indices: info.json's dtypes
    assert typed.equals(own)  # task_index 1 on episode 1 ("hold still"): the run's own, not made
    assert own["task_index"].to_pylist().count(1) == 8


def test_a_store_of_steps_1_0_exports_its_metadata_numbers(tmp_path):
    from rlarrow.core.ingest import ingest
    from rlarrow.io.lerobot import export_lerobot, import_lerobot

    ingest(tmp_path / "old", source_as("1.0"), progress=False)  # the numbers as steps 1.0 kept them
    old = rlarrow.Store.open(tmp_path / "old").read("steps")
    assert "infos" not in old.column_names or old["infos"].null_count == old.num_rows
    import_lerobot(SRC, tmp_path / "new", progress=False)
    for name in ("old", "new"):
        export_lerobot(tmp_path / name, tmp_path / f"{name}-out", images="png", progress=False)
    assert written(tmp_path / "old-out").equals(written(tmp_path / "new-out"))
    assert written(tmp_path / "new-out")["task_index"].to_pylist().count(1) == 8


def test_frame_columns_go_arrow_to_arrow_value_exact(tmp_path):
    """Other layouts of a feature's values (lists, another dtype, binary-layout tensors) become the
    step's type in Arrow: the same values NumPy made, and a view, not a copy, where no cast is needed."""
    from rlarrow.core.tensors import to_numpy
    from rlarrow.io.lerobot.frame_steps import episode_columns, episode_steps

    n = 5
    rng = np.random.default_rng(3)
    state = rng.standard_normal((n, 3))  # float64 on disk, float32 declared: cast as astype does
    grid = rng.standard_normal((n, 2, 4)).astype(np.float32)  # two dimensions: the binary layout
    wide = rng.standard_normal((n, 1024)).astype(np.float32)  # 1,024 elements: the binary layout
    table = pa.table({
        "observation.state": pa.array(list(state), pa.list_(pa.float64())),
        "observation.grid": pa.array([list(map(list, g)) for g in grid], pa.list_(pa.list_(pa.float32()))),
        "action": pa.FixedSizeListArray.from_arrays(pa.array(wide.reshape(-1)), 1024),
        "timestamp": pa.array(np.arange(n) / 10, pa.float64()),  # float64 on disk, float32 declared
        "frame_index": pa.array(np.arange(n), pa.int32()),
        "next.success": pa.array([False, False, True, False, True]),
        "note": pa.array(list("abcde")),
    })
    features = {
        "observation.state": {"dtype": "float32", "shape": [3]},
        "observation.grid": {"dtype": "float32", "shape": [2, 4]},
        "action": {"dtype": "float32", "shape": [1024]},
        "timestamp": {"dtype": "float32", "shape": [1]},
        "frame_index": {"dtype": "int64", "shape": [1]},
        "next.success": {"dtype": "bool", "shape": [1]},
        "note": {"dtype": "string", "shape": [1]},
    }
    columns = episode_columns(tmp_path, table, features, {"episode_index": 0}, {})
    obs = columns["observation"]
    assert all(isinstance(v, pa.Array) for v in (obs["state"], obs["grid"], columns["action"]))
    np.testing.assert_array_equal(to_numpy(obs["state"]), state.astype(np.float32))
    np.testing.assert_array_equal(to_numpy(obs["grid"]), grid)
    np.testing.assert_array_equal(to_numpy(columns["action"]), wide)
    source = table.column("action").chunk(0).values.buffers()[1]  # the frames' own bytes, viewed
    assert columns["action"].storage.buffers()[1].address == source.address
    infos = columns["infos"]
    assert {k: v.type for k, v in infos.items()} == {
        "timestamp": pa.float32(), "frame_index": pa.int64(), "next.success": pa.bool_()}
    assert infos["timestamp"].to_pylist() == (np.arange(n) / 10).astype(np.float32).tolist()
    assert list(columns["extra"]) == ["note"]  # text stays JSON metadata
    steps = episode_steps(columns, "r", 0)
    assert steps.column("infos").is_null().to_pylist() == [False] * n + [True]
    assert steps.column("infos").combine_chunks().field("next.success").to_pylist()[:n] == \
        [False, False, True, False, True]
    assert steps.column("metadata").null_count == 1


@pytest.mark.slow  # (lerobot loads both datasets in subprocesses: about 40 s)
@pytest.mark.skipif(
    importlib.util.find_spec("lerobot") is None,
    reason="lerobot is not installed (make test installs it, with --no-deps: see the Makefile)")
def test_convert_to_lerobot_gives_lerobot_the_same_frames(tmp_path):
    """``rlarrow convert DATASET --to lerobot``: lerobot 0.4.4 loads the same items from both, the
    per-frame numbers (carried as typed infos, no store between) value for value and dtype for dtype."""
    import subprocess
    import sys

    from test_lerobot_export import VIDEO_TOLERANCE, lerobot_load

    done = subprocess.run([sys.executable, "-m", "rlarrow", "convert", str(SRC), "--to", "lerobot",
                           "-o", str(tmp_path / "out")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    want = lerobot_load(SRC, "v3.0", tmp_path / "a")
    got = lerobot_load(tmp_path / "out", "v3.0", tmp_path / "b")
    for key in (*KEYS, "observation.state", "action", "observation.image", "task"):
        assert got[key].dtype == want[key].dtype, key
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    top = np.abs(got["observation.images.top"] - want["observation.images.top"]).max()
    assert top * 255 <= VIDEO_TOLERANCE  # (AV1 twice)
