"""Memory snapshots unroll into episodes and steps in time order, partial episodes marked."""

from __future__ import annotations

import importlib.util
import json
import warnings

import numpy as np
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core.tensors import to_numpy
from rlarrow.io.memory.importer import import_memory
from rlarrow.io.memory.npz import read_npz
from rlarrow.io.memory.snapshot import MemorySnapshot
from rlarrow.io.memory.unroll import (
    AutoresetAssumptionWarning,
    detect_autoreset,
    memory_to_episodes,
    resolve_names,
    time_order,
)

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
        report = import_memory([SKRL / "wrapped" / "memories" / "*.pt"], tmp_path / "s",
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


# --------------------------------------------------------------------------- autoreset modes

def one_env(states, rewards, done, next_states=None, *, names=("observations", "next_observations"),
            truncated=True):
    """A never-wrapped one-env snapshot from per-transition lists (skrl 2 names by default)."""
    n = len(states)
    col = lambda v, dt: np.asarray(v, dt).reshape(n, 1, -1)  # noqa: E731
    tensors = {names[0]: col(states, np.float32), "actions": col(np.arange(n) % 2, np.int64),
               "rewards": col(rewards, np.float32), "terminated": col(done, bool)}
    if truncated:
        tensors["truncated"] = col(np.zeros(n), bool)
    if next_states is not None:
        tensors[names[1]] = col(next_states, np.float32)
    return MemorySnapshot(tensors, is_full=False, write_pointer=n, env_pointer=0)


def summary(episodes, steps):
    obs = steps.column("observation").to_pylist()
    meta = [json.loads(m) for m in episodes.column("metadata").to_pylist()]
    rows = episodes.select(["num_steps", "return", "partial_end"]).to_pylist()
    return [tuple(r.values()) for r in rows], [o if o is None else o[0] for o in obs], meta


# Two CartPole-like episodes (states 1..3, then 10..11), as skrl 2 stores them under each mode.
# NEXT_STEP: the end at t=2 is followed by the autoreset transition (state = final obs 4,
# next state = reset obs 10, reward 0, not done), which is no step of any episode.
NEXT_STEP = dict(states=[1, 2, 3, 4, 10, 11], rewards=[1, 1, 1, 0, 1, 1], done=[0, 0, 1, 0, 0, 0],
                 next_states=[2, 3, 4, 10, 11, 12])
# SAME_STEP: the ending step returns the reset obs (10): skrl's next state of the end is 10.
SAME_STEP = dict(states=[1, 2, 3, 10, 11], rewards=[1, 1, 1, 1, 1], done=[0, 0, 1, 0, 0],
                 next_states=[2, 3, 10, 11, 12])
# a memory that stores the true final observation (4): nothing to fix
CLEAN = dict(states=[1, 2, 3, 10, 11], rewards=[1, 1, 1, 1, 1], done=[0, 0, 1, 0, 0],
             next_states=[2, 3, 4, 11, 12])


def test_next_step_autoreset_transitions_are_dropped():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read from the data: nothing assumed
        rows, obs, meta = summary(*memory_to_episodes(one_env(**NEXT_STEP), run_id="r"))
    assert rows == [(4, 3.0, False), (3, 2.0, True)]  # 3 + 2 transitions; the reset step is in neither
    assert obs == [1, 2, 3, 4, 10, 11, 12]  # episode 2 starts at the reset observation
    assert [(m["autoreset"], m["autoreset_from"], m["final_observation"]) for m in meta] == \
        [("next-step", "data", "next_states")] * 2
    assert meta[1]["memory_index_first"] == 4  # memory row 3 (the autoreset step) belongs to no episode
    # the same rows read as "none" (the old unrolling): episode 2 starts at the final obs, reward 0
    rows, obs, _ = summary(*memory_to_episodes(one_env(**NEXT_STEP), run_id="r", autoreset="none"))
    assert rows == [(4, 3.0, False), (4, 2.0, True)] and obs[4] == 4


def test_next_step_without_next_states_takes_the_final_obs_from_the_autoreset_step():
    """skrl's PPO stores no next_observations: the final obs is the autoreset step's state, or unknown."""
    data = dict(NEXT_STEP, next_states=None, done=[0, 0, 1, 0, 0, 1])  # ends again at the last row
    rows, obs, meta = summary(*memory_to_episodes(one_env(**data), run_id="r"))
    assert rows == [(4, 3.0, False), (3, 2.0, False)]
    assert obs == [1, 2, 3, 4, 10, 11, None]  # the second end's autoreset step is not in the snapshot
    assert [m["final_observation"] for m in meta] == ["autoreset transition", "unknown"]
    assert meta[0]["autoreset_from"] == "data"


def test_same_step_final_obs_is_unknown_and_nothing_is_dropped():
    rows, obs, meta = summary(*memory_to_episodes(one_env(**SAME_STEP), run_id="r"))
    assert rows == [(4, 3.0, False), (3, 2.0, True)]
    assert obs == [1, 2, 3, None, 10, 11, 12]  # next_states of the end is the reset obs, not the final one
    assert [(m["autoreset"], m["autoreset_from"], m["final_observation"]) for m in meta] == \
        [("same-step", "data", "unknown"), ("same-step", "data", "next_states")]
    # a reward-1 step after the end rules next-step out also without next_states
    rows, obs, meta = summary(*memory_to_episodes(one_env(**dict(SAME_STEP, next_states=None)), run_id="r"))
    assert rows == [(4, 3.0, False), (3, 2.0, True)] and obs == [1, 2, 3, None, 10, 11, None]
    assert meta[0]["autoreset"] == "same-step"


def test_a_memory_with_true_final_observations_is_read_as_none():
    rows, obs, meta = summary(*memory_to_episodes(one_env(**CLEAN), run_id="r"))
    assert rows == [(4, 3.0, False), (3, 2.0, True)] and obs == [1, 2, 3, 4, 10, 11, 12]
    assert meta[0]["autoreset"] == "none" and meta[0]["autoreset_from"] == "data"


def test_detection_rules_and_what_is_assumed():
    assert detect_autoreset(one_env(**NEXT_STEP)).mode == "next-step"
    assert (detect_autoreset(one_env(**SAME_STEP)).mode, detect_autoreset(one_env(**CLEAN)).mode) == \
        ("same-step", "none")
    # rewards are 0 elsewhere too: zeros after the ends prove nothing, next-step is assumed and said
    sparse = dict(NEXT_STEP, rewards=[0, 0, 1, 0, 0, 1])
    det = detect_autoreset(one_env(**sparse))
    assert (det.mode, det.exact, det.ends) == ("next-step", False, 1)
    with pytest.warns(AutoresetAssumptionWarning, match="assumed next-step.*pass autoreset='next-step'"):
        _, _, meta = summary(*memory_to_episodes(one_env(**sparse), run_id="r"))
    assert meta[0]["autoreset_from"] == "assumed"
    # an end only at the last row, with next_states: the data cannot tell, and it matters
    last = dict(states=[1, 2, 3], rewards=[1, 1, 1], done=[0, 0, 1], next_states=[2, 3, 4])
    assert detect_autoreset(one_env(**last)).mode is None
    with pytest.warns(AutoresetAssumptionWarning, match="no episode end is followed"):
        memory_to_episodes(one_env(**last), run_id="r")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a mode given, or one that changes nothing, is not an assumption
        _, obs, meta = summary(*memory_to_episodes(one_env(**last), run_id="r", autoreset="same-step"))
        assert obs[-1] is None and meta[0]["autoreset_from"] == "given"
        memory_to_episodes(one_env(**dict(last, done=[0, 0, 0])), run_id="r")
    with pytest.raises(rlarrow.InvalidInputError, match="autoreset='next': choose one of auto"):
        memory_to_episodes(one_env(**NEXT_STEP), run_id="r", autoreset="next")


def test_skrl2_names_win_over_skrl1_and_roles_are_checked():
    snap = one_env(**NEXT_STEP)
    snap.tensors["states"] = np.full_like(snap.tensors["observations"], 99.0)  # skrl 2's privileged state
    assert resolve_names(snap)["states"] == "observations"
    _, obs, _ = summary(*memory_to_episodes(snap, run_id="r"))
    assert 99.0 not in obs
    old = one_env(**NEXT_STEP, names=("states", "next_states"))  # skrl 1
    assert resolve_names(old)["next_states"] == "next_states"
    assert summary(*memory_to_episodes(old, run_id="r"))[:2] == summary(*memory_to_episodes(
        one_env(**NEXT_STEP), run_id="r"))[:2]
    with pytest.raises(rlarrow.InvalidInputError, match="'obs' is not a role"):
        memory_to_episodes(snap, run_id="r", names={"obs": "observations"})
    with pytest.raises(rlarrow.InvalidInputError, match="no tensor 'nope'"):
        memory_to_episodes(snap, run_id="r", names={"states": "nope"})


def test_convert_says_an_autoreset_assumption_once(tmp_path):
    from rlarrow.io.memory.npz import write_npz

    sparse = one_env(**dict(NEXT_STEP, rewards=[0, 0, 1, 0, 0, 1]))
    for i in range(3):
        write_npz(sparse.tensors, tmp_path / "memories" / f"m{i}.npz")
    report = import_memory([tmp_path / "memories"], tmp_path / "s", episodes=True, progress=False)
    said = [a for a in report.assumptions if "autoreset" in a]
    assert len(said) == 1 and said[0].startswith("3 of 3 snapshots"), report.assumptions
    again = import_memory([tmp_path / "memories"], tmp_path / "s2", episodes=True, progress=False,
                           autoreset="next-step")
    assert not any("autoreset" in a for a in again.assumptions) and again.steps == report.steps
    with pytest.raises(rlarrow.InvalidInputError, match="autoreset='bad': choose one of"):
        import_memory([tmp_path / "memories"], tmp_path / "s3", episodes=True, autoreset="bad")
