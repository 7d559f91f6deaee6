"""Format to format without a store: ``rlarrow convert INPUT --to FORMAT -o OUTPUT``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlarrow.core.errors import ArgumentError, UnsupportedInputError
from rlarrow.io.transcode import convert_format

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
minari = pytest.importorskip("minari",
                             reason="Minari's own reader checks the dataset written (pip install minari)")


@pytest.mark.parametrize("backend", ["parquet-v0", "hdf5-v0"])
def test_a_minari_dataset_written_again_reads_back_in_minari_value_for_value(tmp_path: Path,
                                                                            backend: str) -> None:
    from minari.dataset.minari_dataset import MinariDataset

    source = FIXTURES / "minari" / "cartpole" / backend
    out = subprocess.run([sys.executable, "-m", "rlarrow", "convert", str(source), "--to", "minari",
                          "-o", str(tmp_path / "out")], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "store").exists() and "as minari" in out.stdout
    want, got = MinariDataset(source / "data"), MinariDataset(tmp_path / "out" / "data")
    assert got.total_episodes == want.total_episodes and got.total_steps == want.total_steps
    for a, b in zip(want.iterate_episodes(), got.iterate_episodes(), strict=True):
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)
        np.testing.assert_array_equal(a.terminations, b.terminations)
        np.testing.assert_array_equal(a.truncations, b.truncations)


def test_a_target_that_holds_something_is_refused_and_kept(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(Exception, match="overwrite"):
        convert_format(FIXTURES / "minari" / "cartpole" / "arrow-v0", "minari", tmp_path / "out")
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


def test_what_cannot_be_converted_says_what_can(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match="does not write tfevents"):
        convert_format(FIXTURES / "minari" / "cartpole" / "arrow-v0", "tfevents", tmp_path / "o")
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(UnsupportedInputError, match="to another format is one of .*Minari datasets"):
        convert_format(tmp_path / "x.txt", "minari", tmp_path / "o")


def test_an_envlogger_directory_becomes_a_minari_dataset_without_a_store(tmp_path: Path) -> None:
    pytest.importorskip("envlogger", reason="envlogger reads the riegeli files (pip install envlogger)")
    from minari.dataset.minari_dataset import MinariDataset

    from rlarrow.io.envlogger import read_envlogger

    catch = FIXTURES / "envlogger" / "catch"
    convert_format(catch, "minari", tmp_path / "out", data_format="arrow")
    got = MinariDataset(tmp_path / "out" / "data")
    with read_envlogger(catch) as source:
        episodes = list(source.by_episode())
    assert got.total_episodes == len(episodes)
    for (steps, row), ep in zip(episodes, got.iterate_episodes(), strict=True):
        n = steps.num_rows - 1
        assert row is not None and len(ep.actions) == n == row["num_steps"] - 1
        np.testing.assert_array_equal(ep.rewards, steps.column("reward").to_numpy(zero_copy_only=False)[:n])


def test_a_d4rl_file_becomes_minari_and_robomimic_without_a_store(tmp_path: Path) -> None:
    pytest.importorskip("h5py", reason="h5py reads the HDF5 files (pip install h5py)")
    import h5py
    from minari.dataset.minari_dataset import MinariDataset

    from rlarrow.io.hdf5 import read_hdf5

    d4rl = FIXTURES / "hdf5" / "d4rl_mujoco.hdf5"
    written = convert_format(d4rl, "robomimic", tmp_path / "demos")
    assert written == [tmp_path / "demos" / "demo.hdf5"]
    with read_hdf5(d4rl) as source:
        episodes = [(steps, row) for steps, row in source.by_episode()]
    with h5py.File(written[0]) as f:
        demos = sorted(f["data"], key=lambda d: int(d.split("_")[1]))
        assert len(demos) == len(episodes)
        for demo, (steps, _) in zip(demos, episodes, strict=True):
            n = int(f["data"][demo].attrs["num_samples"])
            want = steps.column("reward").to_numpy(zero_copy_only=False)[:n]
            rewards = f["data"][demo]["rewards"]
            np.testing.assert_array_equal(rewards[:], want.astype(rewards.dtype))
    from rlarrow.core.errors import RLArrowWarning

    with pytest.warns(RLArrowWarning, match="without a final observation"):  # D4RL's last: cut short
        convert_format(d4rl, "minari", tmp_path / "m", data_format="parquet")
    assert MinariDataset(tmp_path / "m" / "data").total_episodes >= 1


def test_a_d4rl_file_becomes_minari_hdf5_with_its_typed_infos(tmp_path: Path) -> None:
    pytest.importorskip("h5py", reason="h5py reads the HDF5 files (pip install h5py)")
    import h5py
    from minari.dataset.minari_dataset import MinariDataset

    from rlarrow.core.errors import RLArrowWarning

    d4rl = FIXTURES / "hdf5" / "d4rl_mujoco.hdf5"
    # Minari's HDF5 backend is written in a child process: read_hdf5's source is made again there
    with pytest.warns(RLArrowWarning, match="without a final observation"):
        convert_format(d4rl, "minari", tmp_path / "m", data_format="hdf5")
    episodes = list(MinariDataset(tmp_path / "m" / "data").iterate_episodes())
    assert episodes
    first = 0
    with h5py.File(d4rl) as f:
        for ep in episodes:
            n = len(ep.actions)
            assert set(ep.infos) == set(f["infos"])
            for key, got in ep.infos.items():
                want = f[f"infos/{key}"][first:first + n]
                assert got.dtype == want.dtype and np.array_equal(got[:-1], want), key
            first += n


def test_rlds_to_minari_and_back_keeps_every_value(tmp_path: Path) -> None:
    from rlarrow.io.minari import read_minari
    from rlarrow.io.rlds import read_rlds

    convert_format(FIXTURES / "minari" / "cartpole" / "arrow-v0", "rlds", tmp_path / "rlds")
    convert_format(tmp_path / "rlds", "minari", tmp_path / "m", data_format="arrow")
    with read_minari(FIXTURES / "minari" / "cartpole" / "arrow-v0", run_id="r") as a, \
            read_rlds(tmp_path / "rlds", run_id="r") as b, read_minari(tmp_path / "m", run_id="r") as c:
        want = a.read()[0]
        for got in (b.read()[0], c.read()[0]):
            for name in ("episode_id", "step", "action", "reward", "is_first", "is_last", "is_terminal"):
                assert got.column(name).to_pylist() == want.column(name).to_pylist(), name
            np.testing.assert_array_equal(np.stack(got.column("observation").to_numpy(zero_copy_only=False)),
                                          np.stack(want.column("observation").to_numpy(zero_copy_only=False)))


def test_the_reader_takes_its_own_options_only(tmp_path: Path) -> None:
    from rlarrow.io.minari import MinariOptions, read_minari
    from rlarrow.io.registry import ImportOptions
    from rlarrow.io.rlds import RldsOptions

    src = FIXTURES / "minari" / "cartpole" / "arrow-v0"
    with pytest.raises(ArgumentError, match="the minari reader takes a MinariOptions"):
        convert_format(src, "minari", tmp_path / "x", options=RldsOptions())
    assert not (tmp_path / "x").exists()
    given = {"own": MinariOptions(), "by name": {"minari": MinariOptions()}, "old bag": ImportOptions()}
    for i, options in enumerate(given.values()):
        convert_format(src, "minari", tmp_path / str(i), options=options, data_format="arrow")
    with read_minari(src, run_id="r") as want_source:
        want = want_source.read()[0].column("action").to_pylist()
    for i in range(len(given)):
        with read_minari(tmp_path / str(i), run_id="r") as got:
            assert got.read()[0].column("action").to_pylist() == want
