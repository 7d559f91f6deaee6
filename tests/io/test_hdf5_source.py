"""D4RL and robomimic files read without a store (``read_hdf5``), and robomimic written from any source.

The fixtures (``tests/fixtures/hdf5``) come from the peers' own writers (d4rl's ``DatasetWriter``,
D4RL's MuJoCo ``convert_buffer.py``, robomimic's ``convert_d4rl.py``); the Minari fixture from
Minari's ``DataCollector``. A robomimic file written here is read back with h5py, as robomimic's
``SequenceDataset`` reads it, and with ``read_hdf5``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import numpy as np
import polars as pl
import pyarrow.compute as pc
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core.errors import CorruptFileError, UnsupportedInputError

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("h5py") is None, reason="HDF5 files need h5py: pip install 'rlarrow[hdf5]'"
)

HDF5 = FIXTURES / "hdf5"
D4RL = [HDF5 / "d4rl_writer.hdf5", HDF5 / "d4rl_mujoco.hdf5"]
ROBOMIMIC = HDF5 / "robomimic_d4rl.hdf5"
MINARI = FIXTURES / "minari" / "cartpole"


def frame(table):
    """Steps or episodes as a Polars frame in key order (tensors as lists), run id left out."""
    keys = [k for k in ("episode_id", "step") if k in table.column_names]
    return pl.from_arrow(table.drop(["run_id"])).sort(keys)


@pytest.mark.parametrize("path", [*D4RL, ROBOMIMIC], ids=lambda p: p.stem)
def test_read_hdf5_gives_what_the_import_stores_without_a_store(tmp_path, path):
    from rlarrow.io.hdf5 import import_hdf5, read_hdf5

    with read_hdf5(path, run_id="r") as source:
        steps = pl.from_arrow(source.steps())  # a stream of record batches, as Polars takes it
        _, episodes = source.read()
        run = source.run
    assert not list(tmp_path.iterdir())  # nothing written anywhere
    report = import_hdf5(path, tmp_path / "s", run_id="r")
    store = rlarrow.Store.open(tmp_path / "s")
    stored = store.read("steps")
    assert report.steps == steps.height == stored.num_rows and report.episodes == episodes.num_rows
    assert frame(store.read("steps").select(steps.columns)).equals(steps.drop("run_id").sort("episode_id",
                                                                                             "step"))
    assert frame(store.read("episodes").select(episodes.column_names)).equals(frame(episodes))
    assert store.runs().column("source").to_pylist() == [run.source] and run.source in ("d4rl", "robomimic")


def test_read_hdf5_keeps_nan_int_and_bool_values_exactly(tmp_path):
    import h5py

    path = tmp_path / "exact.hdf5"
    obs = np.array([[np.nan, -0.0], [1e-45, 3.4e38], [np.inf, -np.inf]], np.float32)
    with h5py.File(path, "w") as f:
        f["observations"] = obs
        f["actions"] = np.array([[2**62], [-(2**62)], [7]], np.int64)
        f["rewards"] = np.array([0.1, np.nan, 2.0], np.float32)
        f["terminals"] = np.array([False, False, True])
        f["infos/flag"] = np.array([True, False, True])
        f["infos/count"] = np.array([2**62, -1, 0], np.int64)
        f["infos/q"] = np.array([[np.nan, -0.0], [1.5, np.inf], [0.0, 1e-300]])
        f["infos/name"] = np.array([b"a", b"b", b"c"])  # (bytes: not numbers, the steps' metadata)
    from rlarrow.core.metadata import decode
    from rlarrow.core.step_columns import infos_leaves
    from rlarrow.core.tensors import to_numpy
    from rlarrow.io.hdf5 import read_hdf5

    with read_hdf5(path) as source:
        steps, episodes = source.read()
    got = to_numpy(steps.column("observation").combine_chunks())
    assert got.dtype == np.float32 and np.array_equal(got[:3], obs, equal_nan=True)
    assert np.signbit(got[0, 1])
    actions = to_numpy(steps.column("action").combine_chunks().slice(0, 3))
    assert actions.dtype == np.int64 and actions[:, 0].tolist() == [2**62, -(2**62), 7]
    rewards = steps.column("reward").to_pylist()
    assert np.isnan(rewards[1]) and rewards[0] == np.float32(0.1) and rewards[3] is None
    # numbers are the typed infos column (steps 1.1), in their dtypes; the final step's is null
    assert steps.schema.field("infos").type.names == ["count", "flag", "q"]
    (infos, valid) = infos_leaves(steps)
    assert valid.tolist() == [True, True, True, False]
    assert infos["flag"].dtype == np.bool_ and infos["flag"][:3].tolist() == [True, False, True]
    assert infos["count"].dtype == np.int64 and infos["count"][:3].tolist() == [2**62, -1, 0]
    q = infos["q"]
    assert q.dtype == np.float64 and np.array_equal(q[:3], [[np.nan, -0.0], [1.5, np.inf], [0.0, 1e-300]],
                                                    equal_nan=True) and np.signbit(q[0, 1])
    names = [decode(m, t) for m, t in zip(steps.column("metadata").to_pylist(),
                                          steps.column("metadata_types").to_pylist(), strict=True)]
    assert names == [{"infos": {"name": b"a"}}, {"infos": {"name": b"b"}}, {"infos": {"name": b"c"}}, None]
    assert episodes.column("terminated").to_pylist() == [True]


@pytest.mark.parametrize("path", [D4RL[1], ROBOMIMIC], ids=lambda p: p.stem)
def test_the_import_opens_the_file_once(tmp_path, monkeypatch, path):
    import h5py

    from rlarrow.io.hdf5 import import_d4rl, import_robomimic

    opened = []
    real = h5py.File.__init__

    def counting(self, name, *args, **kwargs):
        if isinstance(name, (str, os.PathLike)):  # (a FileID is a handle open already: h5py's `.file`)
            opened.append(os.fspath(name))
        real(self, name, *args, **kwargs)

    monkeypatch.setattr(h5py.File, "__init__", counting)
    importer = import_d4rl if path.stem.startswith("d4rl") else import_robomimic
    report = importer(path, tmp_path / "s", chunk_bytes=2048)  # many chunks: still one open
    assert report.steps > 0
    assert opened == [os.fspath(path)]


def test_import_of_the_other_layout_is_refused_after_one_open(tmp_path):
    from rlarrow.io.hdf5 import import_d4rl, import_robomimic

    with pytest.raises(UnsupportedInputError, match="not a d4rl file \\(its layout is robomimic\\)"):
        import_d4rl(ROBOMIMIC, tmp_path / "s")
    with pytest.raises(UnsupportedInputError, match="not a robomimic file \\(its layout is d4rl\\)"):
        import_robomimic(D4RL[0], tmp_path / "s")


@pytest.mark.parametrize("layout", ["d4rl", "robomimic"])
def test_damage_in_the_last_episode_leaves_the_store_at_its_previous_version(tmp_path, layout):
    import h5py

    from rlarrow.io.hdf5 import import_hdf5

    path = tmp_path / f"{layout}.hdf5"
    shutil.copy(D4RL[1] if layout == "d4rl" else ROBOMIMIC, path)
    with h5py.File(path, "r+") as f:
        if layout == "d4rl":  # a NaN flag in the last row: found in the last chunk read
            terminals = f["terminals"][()].astype(np.float32)
            del f["terminals"]
            terminals[-1] = np.nan
            f["terminals"] = terminals
        else:  # the last demo acts in another dtype than the first
            last = sorted(f["data"], key=lambda k: int(k.split("_")[1]))[-1]
            actions = f[f"data/{last}/actions"][()]
            del f[f"data/{last}/actions"]
            f[f"data/{last}/actions"] = actions.astype(np.float16)
    store_path = tmp_path / "s"
    import_hdf5(D4RL[0], store_path, run_id="before")
    store = rlarrow.Store.open(store_path)
    version, steps = store.version, store.row_count("steps")
    with pytest.raises(CorruptFileError):
        import_hdf5(path, store_path, run_id="damaged", chunk_bytes=1024)
    store = rlarrow.Store.open(store_path)
    assert store.version == version and store.row_count("steps") == steps
    assert store.runs().column("run_id").to_pylist() == ["before"]


def test_write_robomimic_from_a_minari_source_reads_back_value_for_value(tmp_path):
    import h5py

    from rlarrow.io.hdf5 import read_hdf5, write_robomimic
    from rlarrow.io.minari import read_minari

    with read_minari(MINARI / "arrow-v0", run_id="m") as source:
        minari_steps, minari_episodes = source.read()
    with read_minari(MINARI / "arrow-v0", run_id="m") as source:
        out = write_robomimic(source, tmp_path / "demos.hdf5")
    with h5py.File(out, "r") as f:  # as robomimic's SequenceDataset reads it
        demos = sorted(f["data"], key=lambda k: int(k.split("_")[1]))
        assert len(demos) == minari_episodes.num_rows
        assert int(f["data"].attrs["total"]) == sum(int(f[f"data/{d}"].attrs["num_samples"]) for d in demos)
        for eid in minari_episodes.column("episode_id").to_pylist():
            g = f[f"data/demo_{eid}"]
            ep = minari_steps.filter(pc.equal(minari_steps["episode_id"], eid)).sort_by("step")
            n = ep.num_rows - 1
            obs = np.asarray(ep.column("observation").to_pylist(), np.float32)
            assert np.array_equal(g["obs/flat"][()], obs[:n])
            assert np.array_equal(g["next_obs/flat"][()], obs[1:])
            assert g["actions"][()].tolist() == ep.column("action").to_pylist()[:n]
            assert g["rewards"][()].tolist() == ep.column("reward").to_pylist()[:n]
    with read_hdf5(out, run_id="m") as back:  # and rlarrow's own reader gives the same episodes
        steps, episodes = back.read()
    cols = ["episode_id", "step", "reward", "is_first", "is_last", "is_terminal"]
    assert frame(steps.select(["run_id", *cols])).equals(frame(minari_steps.select(["run_id", *cols])))
    assert episodes.column("return").to_pylist() == minari_episodes.sort_by("episode_id").column(
        "return").to_pylist()


def test_write_robomimic_of_a_d4rl_source_spanning_chunks_equals_the_export(tmp_path):
    import h5py

    from rlarrow.io.hdf5 import export_robomimic, import_hdf5, read_hdf5, write_robomimic

    with read_hdf5(D4RL[1], options=None) as source:
        direct = write_robomimic(source, tmp_path / "direct.hdf5")
    from rlarrow.io.hdf5 import HDF5Options

    with read_hdf5(D4RL[1], options=HDF5Options(chunk_bytes=512)) as source:  # episodes span chunks
        small = write_robomimic(source, tmp_path / "small.hdf5")
    import_hdf5(D4RL[1], tmp_path / "s")
    exported = export_robomimic(tmp_path / "s", tmp_path / "export.hdf5")

    def datasets(path):
        out = {}
        with h5py.File(path, "r") as f:
            f.visititems(lambda k, n: out.__setitem__(k, (n.dtype.str, n[()].tolist()))
                         if isinstance(n, h5py.Dataset) else None)
        return out

    assert datasets(direct) == datasets(small) == datasets(exported)
    assert any(k.endswith("infos/qpos") for k in datasets(direct))


@pytest.mark.parametrize("module", ["rlarrow.io.hdf5", "rlarrow.io.hdf5.hdf5_reading",
                                    "rlarrow.io.hdf5.robomimic_writing"])
def test_the_packages_examples_run(module, tmp_path, monkeypatch):
    import doctest
    import importlib

    monkeypatch.chdir(tmp_path)
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_an_existing_target_is_refused_in_pythons_words_and_the_clis(tmp_path, capsys):
    from rlarrow.cli.commands import main
    from rlarrow.core.errors import InvalidInputError
    from rlarrow.io.hdf5 import import_hdf5, read_hdf5, write_robomimic

    target = tmp_path / "demos.hdf5"
    target.write_bytes(b"mine")
    with read_hdf5(D4RL[0]) as source, pytest.raises(InvalidInputError, match="pass overwrite=True to"):
        write_robomimic(source, target)
    assert target.read_bytes() == b"mine"
    import_hdf5(D4RL[0], tmp_path / "s", progress=False)
    with pytest.raises(SystemExit) as exited:
        main(["export", str(tmp_path / "s"), "-o", str(target), "--format", "robomimic"])
    assert exited.value.code != 0 and "pass --overwrite to replace it" in capsys.readouterr().err
    assert target.read_bytes() == b"mine"


def test_read_hdf5_streams_a_chunk_at_a_time(tmp_path):
    import h5py

    from rlarrow.io.hdf5 import HDF5Options, read_hdf5

    path, rows = tmp_path / "long.hdf5", 20_000
    with h5py.File(path, "w") as f:  # 1 MiB of observations, one episode per 1,000 rows
        f["observations"] = np.zeros((rows, 13), np.float32)
        f["actions"] = np.zeros((rows, 3), np.float32)
        f["rewards"] = np.ones(rows, np.float32)
        f["terminals"] = np.zeros(rows, bool)
        f["timeouts"] = (np.arange(rows) % 1000) == 999
    sizes, episodes = [], 0
    with read_hdf5(path, options=HDF5Options(chunk_bytes=64 * 1024)) as source:
        for chunk in source:
            sizes.append(chunk.steps.nbytes)
            episodes += 0 if chunk.episodes is None else chunk.episodes.num_rows
    assert len(sizes) > 20 and max(sizes) < 256 * 1024  # no chunk near the file's size
    assert episodes == 20
