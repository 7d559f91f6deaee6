"""skrl 2 memories of a gymnasium 1.x vector env unroll into the episodes the env played.

A real skrl 2 PPO and DQN train on ``gymnasium.make_vec("CartPole-v1", num_envs=4)`` in both
autoreset modes (tests/skrl_train.py); skrl's memory exports itself (pt, npz, csv) each time
it fills, and the same env is recorded by rlarrow's vector recorder and gymnasium's
``RecordEpisodeStatistics``. ``import_memory(exports, store, episodes=True)`` must give the
episodes those two saw: one memory's exports are one time series, so every episode the exports
hold from start to end (across exports too) comes out with its length, return, termination or
truncation (a time limit of 25 or 10 steps; skrl's DQN stores no ``truncated``, so its convert gets
``max_episode_steps``), first observation and (where the memory holds it) last observation;
none invented.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import rlarrow
from rlarrow.core.tensors import to_numpy
from rlarrow.io.memory.importer import import_memory

HAVE_PEERS = all(importlib.util.find_spec(m) is not None for m in ("skrl", "gymnasium", "torch"))
pytestmark = [
    pytest.mark.skipif(not HAVE_PEERS, reason="needs skrl 2, gymnasium 1.x and torch (the test extras)"),
    pytest.mark.slow,
]
#: time limits that cut episodes often: PPO's CartPole episodes grow past 25 steps, DQN's
#: (epsilon-greedy at first) last about 10
LIMITS = {"ppo": 25, "dqn": 10}
RUNS = [("ppo", "next-step"), ("ppo", "same-step"), ("dqn", "next-step"), ("dqn", "same-step")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    from skrl_train import train

    out = {}
    for algo, mode in RUNS:
        out[algo, mode] = train(algo, mode, tmp_path_factory.mktemp(f"{algo}-{mode}"),
                                max_episode_steps=LIMITS[algo])
    return out


def episodes_by_env(store: Path) -> dict[int, list[dict[str, Any]]]:
    """Each env's episodes in time order: fields, first and last observation (None if null)."""
    st = rlarrow.Store.open(store, readonly=True)
    eps = st.read("episodes").to_pylist()
    steps = st.read("steps", columns=["episode_id", "step", "observation", "is_last"])
    obs = to_numpy(steps.column("observation"))
    nulls = steps.column("observation").is_null().to_numpy(zero_copy_only=False)
    ep, step = steps.column("episode_id").to_numpy(), steps.column("step").to_numpy()
    last = steps.column("is_last").to_numpy(zero_copy_only=False)
    out: dict[int, list[dict[str, Any]]] = {}
    for row in eps:
        meta = json.loads(row["metadata"]) if isinstance(row["metadata"], str) else row["metadata"]
        mine = ep == row["episode_id"]
        first, final = np.flatnonzero(mine & (step == 0)), np.flatnonzero(mine & last)
        assert len(first) == 1 and len(final) <= 1 and mine.sum() == row["num_steps"]
        row |= {"meta": meta or {}, "first_obs": obs[first[0]],  # the recorder's partial_end: no last step
                "last_obs": None if not len(final) or nulls[final[0]] else obs[final[0]]}
        out.setdefault(row["env_index"], []).append(row)
    for rows in out.values():
        rows.sort(key=lambda r: (r["meta"].get("snapshot_id") or 0, r["episode_id"]))
    return out


def aligned(whole: list[dict[str, Any]], done: list[dict[str, Any]]) -> int:
    """Where an env's complete unrolled episodes begin among the episodes it finished.

    The first export begins with the env's first episode, but a legacy export cannot say so
    (its first episode is ``partial_start``); a memory without ``truncated`` is cut at the time
    limit only from its first known end on, so a few more episodes may open the series
    partial. Past that, every finished episode follows, in order.
    """
    key = [(r["num_steps"], r["return"]) for r in whole]
    for k in range(1, 5):
        if [(r["num_steps"], r["return"]) for r in done[k:k + len(key)]] == key:
            return k
    first = [(r["num_steps"], r["return"]) for r in done[:8]]
    raise AssertionError(f"the complete episodes {key[:5]}... are not the env's {first}...")


@pytest.mark.parametrize(("algo", "mode"), RUNS)
def test_memory_exports_unroll_to_the_recorded_episodes(runs, tmp_path, algo, mode):
    run = runs[algo, mode]
    recorded = episodes_by_env(run.recorder)
    # the recorder and gymnasium's RecordEpisodeStatistics agree on every finished episode
    for env in range(4):
        done = [r for r in recorded[env] if not r["partial_end"]]
        stats = [(r, n) for e, r, n in run.stats if e == env]
        assert [(r["return"], r["num_steps"] - 1) for r in done] == stats
    truncations = sum(r["truncated"] for rows in recorded.values() for r in rows)
    assert truncations >= 8  # the time limit cut episodes

    tables = {}
    for fmt, directory in run.exports.items():
        store = tmp_path / fmt
        # skrl's DQN stores no truncated: the time limit is said (PPO's memory has truncated)
        limit = {"max_episode_steps": run.max_episode_steps} if algo == "dqn" else {}
        report = import_memory([directory], store, episodes=True, num_envs=4, progress=False, **limit)
        windows = report.snapshots
        assert windows == run.timesteps // run.memory_size
        assert not any("autoreset" in a or "truncated" in a or "consecutive" in a
                       for a in report.assumptions), report.assumptions  # read from the data
        memory = episodes_by_env(store)
        unknown_final = 0
        for env in range(4):
            done = [r for r in recorded[env] if not r["partial_end"]]
            whole = [r for r in memory[env] if not r["partial_start"] and not r["partial_end"]]
            # all the env finished in the exported steps, but a few at the start: every one whole
            shortest = min(r["num_steps"] - 1 for r in done)
            unexported = run.timesteps - windows * run.memory_size
            assert len(whole) >= len(done) - 4 - unexported // shortest > 5, (fmt, env)
            k = aligned(whole, done)
            for got, want in zip(whole, done[k:], strict=False):
                assert (got["num_steps"], got["return"], got["terminated"], got["truncated"]) == \
                    (want["num_steps"], want["return"], want["terminated"], want["truncated"])
                assert np.array_equal(got["first_obs"], want["first_obs"])
                assert got["meta"]["autoreset"] == mode and got["meta"]["autoreset_from"] == "data"
                # the final observation: DQN's next_observations; for PPO the autoreset step's state
                # (in the next export, when the episode ends one), unless the exports end there;
                # never skrl's same-step reset observation
                if got["last_obs"] is not None:
                    assert np.array_equal(got["last_obs"], want["last_obs"])
                    assert mode == "next-step"
                else:  # said, not invented
                    assert got["meta"]["final_observation"] == "unknown"
                    unknown_final += mode == "next-step"
            # exports are joined: only the series' first and last episodes are partial
            partial = [r for r in memory[env] if r["partial_start"] or r["partial_end"]]
            assert len(partial) <= 2 and not any(r["truncated"] for r in partial if r["partial_end"])
            assert any(r["meta"]["snapshot_id"] != r["meta"]["snapshot_id_last"] for r in whole)
        assert unknown_final <= (4 if algo == "ppo" else 0)  # PPO: the last export's very last row
        assert report.episodes == sum(len(v) for v in memory.values())
        tables[fmt] = rlarrow.Store.open(store, readonly=True).read(
            "steps", columns=["episode_id", "step", "env_index", "observation", "action", "reward",
                              "is_last"])
    # skrl's csv keeps every value the pt and npz exports hold (dtypes included)
    assert tables["csv"].equals(tables["pt"]) and tables["npz"].equals(tables["pt"])


def test_a_dqn_memory_without_the_time_limit_says_episodes_may_be_joined(runs, tmp_path):
    run = runs["dqn", "next-step"]
    report = import_memory([run.exports["npz"]], tmp_path / "s", episodes=True, progress=False)
    said = [a for a in report.assumptions if "no truncated tensor" in a]
    assert len(said) == 1 and "max_episode_steps=N" in said[0], report.assumptions
    lengths = rlarrow.Store.open(tmp_path / "s", readonly=True).read("episodes").column("num_steps")
    assert max(lengths.to_pylist()) - 1 > run.max_episode_steps  # joined across the time limit, as said


def _renamed(src: Path, dst: Path, rename: dict[str, str]) -> Path:
    """skrl's npz exports with their tensors renamed (a skrl 1 export, or one of another tool)."""
    dst.mkdir(parents=True)
    for path in sorted(src.glob("*.npz")):
        with np.load(path) as data:
            np.savez(dst / path.name, **{rename.get(k, k): data[k] for k in data.files})
    return dst


def test_skrl1_names_and_a_names_mapping_unroll_alike(runs, tmp_path):
    run = runs["dqn", "next-step"]
    reference = tmp_path / "skrl2"
    import_memory([run.exports["npz"]], reference, episodes=True, run_id="r", progress=False)
    skrl1 = _renamed(run.exports["npz"], tmp_path / "skrl1", {"observations": "states",
                                                              "next_observations": "next_states"})
    import_memory([skrl1], tmp_path / "s1", episodes=True, run_id="r", progress=False)
    custom = _renamed(run.exports["npz"], tmp_path / "custom", {
        "observations": "obs", "next_observations": "obs2", "actions": "act", "rewards": "rew",
        "terminated": "done"})
    with pytest.raises(rlarrow.InvalidInputError, match=r"no tensor for states.*names=\{role: name\}"):
        import_memory([custom], tmp_path / "bad", episodes=True, progress=False)
    import_memory([custom], tmp_path / "s2", episodes=True, run_id="r", progress=False,
                   names={"observations": "obs", "next_states": "obs2", "actions": "act", "rewards": "rew",
                          "terminated": "done"})

    def content(store: Path) -> pa.Table:
        st = rlarrow.Store.open(store, readonly=True)
        eps = st.read("episodes", columns=["episode_id", "env_index", "num_steps", "return", "partial_start",
                                           "partial_end"]).sort_by("episode_id")
        return eps, st.read("steps", columns=["episode_id", "step", "observation", "action"])

    want = content(reference)
    assert want[0].num_rows > 50
    for other in ("s1", "s2"):
        got = content(tmp_path / other)
        assert got[0].equals(want[0]) and got[1].equals(want[1]), other


@pytest.mark.parametrize("mode", ["next-step", "same-step", "same-step, scaled values"])
def test_a_missing_ppo_export_is_found_by_its_advantages(runs, tmp_path, mode):
    # skrl's PPO stores no next observations; its exports chain by the returns and advantages the
    # update wrote after each export (tested from the next export): a lost file cuts the series.
    # With skrl's RunningStandardScaler the returns are stored scaled (an affine link)
    if mode.endswith("scaled values"):
        from skrl_train import train

        run = train("ppo", "same-step", tmp_path / "run", max_episode_steps=LIMITS["ppo"], value_scaler=True)
    else:
        run = runs["ppo", mode]
    files = sorted(run.exports["npz"].glob("*.npz"))
    kept = tmp_path / "kept"
    kept.mkdir()
    for i, path in enumerate(files):
        if i != 3:
            (kept / path.name).write_bytes(path.read_bytes())
    report = import_memory([kept], tmp_path / "s", episodes=True, progress=False)
    said = [a for a in report.assumptions if "not consecutive" in a]
    assert len(said) == 1 and files[2].stem in said[0] and files[4].stem in said[0], report.assumptions
    assert "returns and advantages" in said[0] or "autoreset row" in said[0]
    recorded = episodes_by_env(run.recorder)
    memory = episodes_by_env(tmp_path / "s")
    for env in range(4):
        played = [(r["num_steps"], r["return"]) for r in recorded[env] if not r["partial_end"]]
        whole = [(r["num_steps"], r["return"]) for r in memory[env]
                 if not r["partial_start"] and not r["partial_end"]]
        assert whole and all(w in played for w in whole), env  # none glued across the lost rows
        assert sum(r["meta"].get("partial_start_at") == "gap" for r in memory[env]) == 1
