"""Memory snapshots unroll into episodes and steps in time order, partial episodes marked."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.convert import convert_memory
from rlarrow.io.memory import MemorySnapshot
from rlarrow.io.npz import read_npz
from rlarrow.tensors import to_numpy
from rlarrow.unroll import memory_to_episodes, time_order

SKRL = FIXTURES / "skrl"
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def wrapped_fixture() -> MemorySnapshot:
    """The real wrapped skrl memory; LAYOUT.json says skrl's write pointer was 16, full.

    Its states hold (global time step, env index, ...), next_states time + 0.01.
    """
    snap = read_npz(next((SKRL / "wrapped" / "memories").glob("*.npz")))
    snap.is_full, snap.write_pointer, snap.env_pointer = True, 16, 0
    return snap


def test_wrapped_buffer_unrolls_in_time_order():
    snap = wrapped_fixture()
    episodes, steps = memory_to_episodes(snap, run_id="r", snapshot_id=0)
    obs = to_numpy(steps.column("observation"))
    env = steps.column("env_index").to_numpy()
    assert set(env.tolist()) == {0, 1, 2, 3}
    ep = steps.column("episode_id").to_numpy()
    last = steps.column("is_last").to_numpy(zero_copy_only=False)
    assert np.allclose(obs[:, 1], env + np.where(last, 0.01, 0.0))  # each step's state is its env's
    # within an episode, time moves by one per transition; the final observation is
    # next_states of the last transition (time + 0.01)
    for e in np.unique(ep):
        t = obs[ep == e, 0]
        assert np.array_equal(np.diff(t[:-1]), np.ones(len(t) - 2)), t
        assert np.isclose(t[-1], t[-2] + 0.01)
        assert last[ep == e].tolist() == [False] * (len(t) - 1) + [True]
    # every transition appears once: 64 rows per env, oldest at the write pointer (t=16)
    transitions = obs[~last, 0]
    assert sorted(transitions.tolist()) == sorted(snap.tensors["states"][:, :, 0].ravel().tolist())
    first_ep = episodes.filter(episodes.column("env_index").to_numpy() == 0).to_pylist()[0]
    assert first_ep["partial_start"] and first_ep["episode_id"] == 0
    first_steps = obs[(ep == 0), 0]
    assert first_steps[0] == 16.0  # the oldest retained transition
    # episode rows agree with their steps
    rew = steps.column("reward").to_numpy(zero_copy_only=False)
    for row in episodes.to_pylist():
        mask = ep == row["episode_id"]
        assert row["num_steps"] == mask.sum()
        assert np.isclose(row["return"], np.nansum(rew[mask]))
    term = snap.tensors["terminated"]
    assert episodes.column("terminated").to_numpy(zero_copy_only=False).sum() == term.sum()


def test_storage_order_is_an_assumption_and_said():
    snap = read_npz(next((SKRL / "wrapped" / "memories").glob("*.npz")))
    with pytest.warns(rlarrow.AssumptionWarning, match="write pointer"):
        episodes, _ = memory_to_episodes(snap, run_id="r")
    assert episodes.column("partial_start").to_pylist().count(True) == 4  # one per env


def test_partial_memory_drops_never_written_rows():
    snap = read_npz(next((SKRL / "partial" / "memories").glob("*.npz")))
    orders, known = time_order(snap)
    assert not known and [len(o) for o in orders] == [10, 10, 10, 10]
    snap.is_full, snap.write_pointer, snap.env_pointer = False, 10, 0
    episodes, steps = memory_to_episodes(snap, run_id="r")
    assert not any(episodes.column("partial_start").to_pylist())  # never wrapped: starts are real
    assert not np.isnan(to_numpy(steps.column("observation"))).any()
    assert steps.num_rows == 40 + episodes.num_rows


def test_env_pointer_and_names_mapping():
    """Env 0 wrote row 2 already (env pointer 1): its oldest row is 3, its newest 2."""
    ms, ne = 4, 2
    t = np.arange(ms * ne, dtype=np.float32).reshape(ms, ne, 1)
    t[2, 0] = 100.0  # the newest sample of env 0
    snap = MemorySnapshot({"obs": t, "act": np.zeros((ms, ne, 1), np.int64),
                           "rew": np.ones((ms, ne, 1), np.float32), "done": np.zeros((ms, ne, 1), bool)},
                          is_full=True, write_pointer=2, env_pointer=1)
    episodes, steps = memory_to_episodes(snap, run_id="r", names={"states": "obs", "actions": "act",
                                                                  "rewards": "rew", "terminated": "done"})
    env0 = steps.filter(steps.column("env_index").to_numpy() == 0)
    obs0 = to_numpy(env0.column("observation"))[:, 0].tolist()
    assert obs0[:4] == [6.0, 0.0, 2.0, 100.0] and np.isnan(obs0[4])  # no next_states: null final obs
    assert env0.column("observation").null_count == 1
    assert episodes.column("partial_end").to_pylist() == [True, True]
    assert episodes.column("truncated").to_pylist() == [False, False]
    with pytest.raises(rlarrow.InvalidInputError, match="no tensor for states"):
        memory_to_episodes(snap, run_id="r")


def test_truncation_ends_an_episode_without_terminating():
    trunc = np.zeros((5, 1, 1), bool)
    trunc[1] = True
    term = np.zeros((5, 1, 1), bool)
    term[4] = True
    snap = MemorySnapshot({"states": np.arange(5, dtype=np.float32).reshape(5, 1, 1),
                           "next_states": np.arange(1, 6, dtype=np.float32).reshape(5, 1, 1),
                           "actions": np.zeros((5, 1, 1), np.float32), "rewards": np.ones((5, 1, 1)),
                           "terminated": term, "truncated": trunc},
                          is_full=True, write_pointer=0, env_pointer=0)
    episodes, steps = memory_to_episodes(snap, run_id="r")
    cols = ["num_steps", "terminated", "truncated", "partial_start", "partial_end"]
    got = [tuple(r.values()) for r in episodes.select(cols).to_pylist()]
    assert got == [(3, False, True, True, False), (4, True, False, False, False)]
    assert steps.column("is_terminal").to_pylist() == [False] * 6 + [True]
    assert steps.column("discount").to_pylist() == [1.0, 1.0, None, 1.0, 1.0, 0.0, None]
    assert steps.column("action").to_pylist()[2] is None


@pytest.mark.skipif(not HAVE_TORCH, reason="reading .pt needs torch: pip install 'rlarrow[torch]'")
def test_convert_with_episodes_fills_the_store_and_duckdb_reads_it(tmp_path):
    import duckdb

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the assumption is reported, not warned
        report = convert_memory([SKRL / "wrapped" / "memories" / "*.pt"], tmp_path / "s",
                                episodes=True, progress=False)
    assert report.episodes > 0 and any("write pointer" in a for a in report.assumptions)
    store = rlarrow.Store.open(tmp_path / "s")
    assert store.row_count("steps") == report.steps == 256 + report.episodes
    steps_glob = str(tmp_path / "s" / "steps" / "*.parquet")
    eps_glob = str(tmp_path / "s" / "episodes" / "*.parquet")
    rows = duckdb.execute(
        f"SELECT e.episode_id, e.num_steps, count(*) FROM read_parquet('{eps_glob}') e "
        f"JOIN read_parquet('{steps_glob}') s USING (run_id, episode_id) "
        "GROUP BY ALL HAVING count(*) != e.num_steps").fetchall()
    assert rows == []
