"""skrl 2 memories of a gymnasium 1.x vector env unroll into the episodes the env played.

A real skrl 2 PPO and DQN train on ``gymnasium.make_vec("CartPole-v1", num_envs=4)`` in both
autoreset modes (tests/skrl_train.py); skrl's memory exports itself (pt, npz, csv) each time
it fills, and the same env is recorded by rlarrow's vector recorder and gymnasium's
``RecordEpisodeStatistics``. ``import_memory(exports, store, episodes=True)`` must give the
episodes those two saw: every episode that lies whole in one export, with its length,
return, first observation and (where the memory holds it) last observation; none invented.
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
RUNS = [("ppo", "next-step"), ("ppo", "same-step"), ("dqn", "next-step"), ("dqn", "same-step")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    from skrl_train import train

    out = {}
    for algo, mode in RUNS:
        out[algo, mode] = train(algo, mode, tmp_path_factory.mktemp(f"{algo}-{mode}"))
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


def whole_in_one_export(lengths: list[int], mode: str, memory_size: int,
                        windows: int) -> list[tuple[int, int]]:
    """Which of an env's episodes (by transitions) an export holds whole, start and end seen.

    Returns ``(k, e_k)`` for each: the episode's index and the trainer step of its end.

    skrl exports its memory each time it fills, so export w holds trainer steps
    [w * memory_size, (w + 1) * memory_size). Episode k runs from s_k to e_k; with next-step
    autoreset one more step (the reset) separates it from the next. An export shows an
    episode whole when the end of the one before is in the same export (else the unrolling
    cannot know where it began: partial_start).
    """
    ends, start = [], 0
    for n in lengths:
        ends.append(start + n - 1)
        start = ends[-1] + (2 if mode == "next-step" else 1)
    return [(k, ends[k]) for k in range(1, len(ends))
            if ends[k - 1] // memory_size == ends[k] // memory_size and ends[k] < windows * memory_size]


@pytest.mark.parametrize(("algo", "mode"), RUNS)
def test_memory_exports_unroll_to_the_recorded_episodes(runs, tmp_path, algo, mode):
    run = runs[algo, mode]
    recorded = episodes_by_env(run.recorder)
    # the recorder and gymnasium's RecordEpisodeStatistics agree on every finished episode
    for env in range(4):
        done = [r for r in recorded[env] if not r["partial_end"]]
        stats = [(r, n) for e, r, n in run.stats if e == env]
        assert [(r["return"], r["num_steps"] - 1) for r in done] == stats
    assert not any(r["truncated"] for rows in recorded.values() for r in rows)  # DQN stores no truncated

    tables = {}
    for fmt, directory in run.exports.items():
        store = tmp_path / fmt
        report = import_memory([directory], store, episodes=True, num_envs=4, progress=False)
        windows = report.snapshots
        assert windows == run.timesteps // run.memory_size
        assert not any("autoreset" in a for a in report.assumptions), report.assumptions  # read from the data
        memory = episodes_by_env(store)
        for env in range(4):
            done = [r for r in recorded[env] if not r["partial_end"]]
            expected = whole_in_one_export([r["num_steps"] - 1 for r in done], mode, run.memory_size, windows)
            whole = [r for r in memory[env] if not r["partial_start"] and not r["partial_end"]]
            assert len(whole) == len(expected) > 5, (fmt, env)
            for got, (k, end) in zip(whole, expected, strict=True):
                want = done[k]
                assert (got["num_steps"], got["return"], got["terminated"]) == \
                    (want["num_steps"], want["return"], want["terminated"])
                assert np.array_equal(got["first_obs"], want["first_obs"])
                assert got["meta"]["autoreset"] == mode and got["meta"]["autoreset_from"] == "data"
                # the final observation: DQN's next_observations; for PPO the autoreset step's
                # state, unless the export ends with the episode; never skrl's same-step reset obs
                known = mode == "next-step" and (algo == "dqn" or (end + 1) % run.memory_size != 0)
                if known:
                    assert np.array_equal(got["last_obs"], want["last_obs"])
                else:  # said, not invented
                    assert got["last_obs"] is None and got["meta"]["final_observation"] == "unknown"
            # episodes cut by an export's edge are flagged, one per env and export at most
            partial = [r for r in memory[env] if r["partial_start"] or r["partial_end"]]
            assert len(memory[env]) == len(whole) + len(partial) and len(partial) <= 2 * windows
        assert report.episodes == sum(len(v) for v in memory.values())
        tables[fmt] = rlarrow.Store.open(store, readonly=True).read(
            "steps", columns=["episode_id", "step", "env_index", "observation", "action", "reward",
                              "is_last"])
    # skrl's csv keeps every value the pt and npz exports hold (dtypes included)
    assert tables["csv"].equals(tables["pt"]) and tables["npz"].equals(tables["pt"])


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
    with pytest.raises(rlarrow.InvalidInputError, match=r"no tensor for states.*--names"):
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
