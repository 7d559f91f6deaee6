"""One memory's consecutive exports unroll as one time series (issue 35).

A vector env is played step by step as gymnasium 1.x plays it (next-step or same-step
autoreset, a ``TimeLimit``), its transitions stored as skrl's memory stores them, and the
memory exported each time it fills under skrl's own file names. What ``import_memory(...,
episodes=True)`` makes of the exports is compared with the episodes the env played.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import rlarrow
from rlarrow.io.memory.importer import import_memory
from rlarrow.io.memory.npz import write_npz
from rlarrow.io.memory.snapshot import MemorySnapshot
from rlarrow.io.memory.unroll import memory_series, unroll_series


@dataclass
class Played:
    """What the env played: each env's finished episodes as (transitions, return, truncated)."""

    exports: list[dict[str, np.ndarray]]
    episodes: dict[int, list[tuple[int, float, bool]]] = field(default_factory=dict)


def play(*, envs: int = 3, memory_size: int = 20, exports: int = 6, limit: int = 9, mode: str = "next-step",
         seed: int = 0) -> Played:
    """Episodes end at random (terminated) or after ``limit`` steps (truncated), as a vector env does."""
    rng = np.random.default_rng(seed)
    steps = memory_size * exports
    out = {k: np.zeros((steps, envs, n), dt) for k, n, dt in (
        ("observations", 3, np.float32), ("next_observations", 3, np.float32), ("actions", 1, np.int64),
        ("rewards", 1, np.float32), ("terminated", 1, bool), ("truncated", 1, bool))}
    played: dict[int, list[tuple[int, float, bool]]] = {e: [] for e in range(envs)}
    obs = rng.normal(size=(envs, 3)).astype(np.float32)
    length, ret, reset_next = np.zeros(envs, int), np.zeros(envs), np.zeros(envs, bool)
    for t in range(steps):
        for e in range(envs):
            row = {"observations": obs[e], "actions": [t % 2]}
            if reset_next[e]:  # next-step: this step resets the sub-env, action ignored, reward 0
                new = rng.normal(size=3).astype(np.float32)
                row |= {"next_observations": new, "rewards": [0.0], "terminated": [False],
                        "truncated": [False]}
                reset_next[e] = False
            else:
                new = (obs[e] + rng.normal(scale=0.1, size=3)).astype(np.float32)
                reward = float(rng.integers(1, 4))
                length[e] += 1
                ret[e] += reward
                term = bool(rng.random() < 0.12)
                trunc = not term and length[e] == limit
                if term or trunc:
                    played[e].append((int(length[e]), float(ret[e]), trunc))
                    length[e], ret[e] = 0, 0.0
                    if mode == "next-step":
                        reset_next[e] = True
                    else:  # same-step: the reset observation is returned at once, and stored as next
                        new = rng.normal(size=3).astype(np.float32)
                row |= {"next_observations": new, "rewards": [reward], "terminated": [term],
                        "truncated": [trunc]}
            for k, v in row.items():
                out[k][t, e] = v
            obs[e] = new
    files = [{k: v[i * memory_size:(i + 1) * memory_size] for k, v in out.items()} for i in range(exports)]
    return Played(files, played)


def skrl_name(i: int, memory: str = "0x7f3a2c1b9d50") -> str:
    """The name skrl's ``Memory.save`` gives its i-th export (time written, id of the memory)."""
    return f"24-05-01_10-{i // 60:02d}-{i % 60:02d}-{(37 * i) % 1000000:06d}_memory_{memory}"


def export(played: Played, directory: Path, *, drop: tuple[str, ...] = (),
           skip: tuple[int, ...] = ()) -> Path:
    for i, tensors in enumerate(played.exports):
        if i not in skip:
            write_npz({k: v for k, v in tensors.items() if k not in drop},
                      directory / "memories" / f"{skrl_name(i)}.npz")
    return directory / "memories"


def unrolled(store: Path) -> dict[int, list[dict]]:
    eps = rlarrow.Store.open(store, readonly=True).read("episodes").sort_by("episode_id").to_pylist()
    out: dict[int, list[dict]] = {}
    for row in eps:
        row["meta"] = json.loads(row["metadata"])
        out.setdefault(row["env_index"], []).append(row)
    return out


def complete(rows: list[dict]) -> list[tuple[int, float, bool]]:
    return [(r["num_steps"] - 1, r["return"], r["truncated"]) for r in rows
            if not r["partial_start"] and not r["partial_end"]]


@pytest.mark.parametrize("mode", ["next-step", "same-step"])
@pytest.mark.parametrize("next_states", [True, False], ids=["next_states", "ppo-like"])
def test_episodes_crossing_exports_are_one_episode(tmp_path, mode, next_states):
    played = play(mode=mode)
    drop = () if next_states else ("next_observations",)  # skrl's PPO stores no next observations
    report = import_memory([export(played, tmp_path, drop=drop)], tmp_path / "s", episodes=True,
                           progress=False)
    got = unrolled(tmp_path / "s")
    crossing = 0
    for env, rows in got.items():
        # every episode the env finished, but the first (its start is before what an export shows)
        # and the one still running, comes out whole: length, return, truncation
        assert complete(rows) == played.episodes[env][1:], env
        assert rows[0]["partial_start"] and rows[0]["meta"]["partial_start_at"] == "buffer start"
        assert not rows[-1]["partial_end"] or rows[-1]["meta"]["partial_end_at"] == "last export"
        assert sum(r["partial_start"] or r["partial_end"] for r in rows) == 1 + rows[-1]["partial_end"]
        assert not any(r["truncated"] for r in rows if r["partial_end"])  # an edge is no time limit
        crossing += sum(r["meta"]["snapshot_id"] != r["meta"]["snapshot_id_last"] for r in rows)
        assert all(r["meta"]["autoreset"] == mode and r["meta"]["autoreset_from"] == "data" for r in rows)
    assert crossing >= 5 and not any("autoreset" in a for a in report.assumptions)
    steps = rlarrow.Store.open(tmp_path / "s", readonly=True).read("steps", columns=["reward"])
    assert 0.0 not in steps.column("reward").to_pylist()  # no autoreset row kept, at a boundary or not


def test_a_missing_export_cuts_the_series_and_is_said(tmp_path):
    played = play(exports=7)
    report = import_memory([export(played, tmp_path, skip=(3,))], tmp_path / "s", episodes=True,
                           progress=False)
    said = [a for a in report.assumptions if "not consecutive" in a]
    assert len(said) == 1 and skrl_name(2) in said[0] and skrl_name(4) in said[0], report.assumptions
    for env, rows in unrolled(tmp_path / "s").items():
        at_gap = [r for r in rows if r["meta"].get("partial_end_at") == "gap"]
        after = [r for r in rows if r["meta"].get("partial_start_at") == "gap"]
        assert len(after) == 1 and after[0]["meta"]["snapshot"] == skrl_name(4)
        assert len(at_gap) <= 1 and all(r["meta"]["snapshot_last"] == skrl_name(2) for r in at_gap)
        # what is complete is true: each a contiguous run of the env's own episodes
        whole = complete(rows)
        truth = played.episodes[env]
        before = [r for r in rows if r["episode_id"] < after[0]["episode_id"]]
        assert whole[:len(complete(before))] == truth[1:1 + len(complete(before))]
        tail = complete([r for r in rows if r["episode_id"] > after[0]["episode_id"]])
        assert tail and tail == truth[len(truth) - len(tail):]


def test_without_next_states_a_gap_after_an_end_shows_with_next_step(tmp_path):
    # skrl's PPO stores no next observations: a missing export shows where an env's episode ended
    # with the export before it (next-step autoreset: the next must begin with the reset row)
    for seed in range(50):
        played = play(exports=5, seed=seed)
        before, after = played.exports[1], played.exports[3]
        ended = (before["terminated"][-1, :, 0] | before["truncated"][-1, :, 0])
        reset_row = (after["rewards"][0, :, 0] == 0) & ~after["terminated"][0, :, 0]
        if (ended & ~reset_row).any():
            break
    memories = export(played, tmp_path, drop=("next_observations",), skip=(2,))
    report = import_memory([memories], tmp_path / "s", episodes=True, progress=False)
    said = [a for a in report.assumptions if "not consecutive" in a]
    assert len(said) == 1 and "autoreset row" in said[0], report.assumptions
    for env, rows in unrolled(tmp_path / "s").items():
        assert sum(r["meta"].get("partial_start_at") == "gap" for r in rows) == 1
        whole = complete(rows)
        truth = played.episodes[env]
        # every complete episode is one the env played (none glued across the missing rows)
        assert all(any(truth[i:i + 1] == [w] for i in range(len(truth))) for w in whole), env


def test_a_memory_without_truncated_is_said_and_cut_at_the_time_limit(tmp_path):
    played = play(limit=6, exports=5)
    memories = export(played, tmp_path, drop=("truncated",))  # as skrl's DQN stores it
    report = import_memory([memories], tmp_path / "joined", episodes=True, progress=False)
    said = [a for a in report.assumptions if "no truncated tensor" in a]
    assert len(said) == 1 and "max_episode_steps=N" in said[0] and "may be several joined" in said[0]
    joined = unrolled(tmp_path / "joined")
    assert any(r["num_steps"] - 1 > 6 for rows in joined.values() for r in rows)  # episodes ran together
    report = import_memory([memories], tmp_path / "cut", episodes=True, progress=False, max_episode_steps=6)
    assert not any("truncated" in a for a in report.assumptions), report.assumptions
    for env, rows in unrolled(tmp_path / "cut").items():
        truth = played.episodes[env]
        whole = complete(rows)
        # the first episode's start is unknown, so the cuts begin after its end: the ones after match
        assert whole == truth[len(truth) - len(whole):] and len(whole) >= len(truth) - 4, env
        assert all(r["meta"]["max_episode_steps"] == 6 for r in rows)
    with pytest.raises(rlarrow.ArgumentError, match="max_episode_steps=0: give the env.s time limit"):
        import_memory([memories], tmp_path / "bad", episodes=True, progress=False, max_episode_steps=0)
    # the command line says the same
    from click.testing import CliRunner

    from rlarrow.cli.commands import cli

    result = CliRunner().invoke(cli, ["convert", str(memories), "-o", str(tmp_path / "cli"), "--episodes",
                                      "--max-episode-steps", "6"])
    assert result.exit_code == 0, result.output
    def content(store: Path) -> list[tuple]:
        return [(r["episode_id"], r["num_steps"], r["return"], r["truncated"], r["partial_start"])
                for rows in unrolled(store).values() for r in rows]

    assert content(tmp_path / "cli") == content(tmp_path / "cut")


def test_a_csv_without_num_envs_is_refused_for_episodes(tmp_path):
    from click.testing import CliRunner

    from rlarrow.cli.commands import cli
    from rlarrow.io.memory.csv import write_csv

    played = play(exports=1)
    path = write_csv(MemorySnapshot(played.exports[0]), tmp_path / "memories" / f"{skrl_name(0)}.csv")
    with pytest.raises(rlarrow.InvalidInputError, match=r"pass num_envs=N, the memory's number of envs"):
        import_memory([path], tmp_path / "s", episodes=True, progress=False)
    assert not (tmp_path / "s").exists()  # refused before anything is written
    result = CliRunner().invoke(cli, ["convert", str(path), "-o", str(tmp_path / "s"), "--episodes"])
    assert result.exit_code != 0 and "--num-envs" in result.output
    ok = import_memory([path], tmp_path / "s", episodes=True, progress=False, num_envs=3)
    assert ok.episodes > 3


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="writing a .pt export needs torch: pip install 'rlarrow[torch]'")
def test_exports_of_one_memory_in_two_formats_are_copies_not_one_series(tmp_path):
    from rlarrow.io.memory.pt import write_pt

    played = play(exports=3)
    for i, tensors in enumerate(played.exports):  # each fill saved twice, a microsecond apart
        write_npz(tensors, tmp_path / "memories" / f"{skrl_name(2 * i)}.npz")
        write_pt(MemorySnapshot(tensors), tmp_path / "memories" / f"{skrl_name(2 * i + 1)}.pt")
    import_memory([tmp_path / "memories"], tmp_path / "both", episodes=True, progress=False)
    import_memory(sorted((tmp_path / "memories").glob("*.npz")), tmp_path / "npz", episodes=True,
                  progress=False)
    both, npz = unrolled(tmp_path / "both"), unrolled(tmp_path / "npz")
    for env in npz:  # two series, each the npz one: nothing glued to its own copy
        assert sorted(complete(both[env])) == sorted(complete(npz[env]) * 2) != []


def test_series_are_one_memory_in_time_order():
    z = {"observations": np.zeros((4, 2, 1), np.float32)}
    snaps = [MemorySnapshot(dict(z), name=n) for n in (
        skrl_name(2), skrl_name(0, "0x1"), skrl_name(0), "memory", skrl_name(1), skrl_name(1, "0x1"))]
    assert memory_series(snaps) == [[2, 4, 0], [1, 5], [3]]
    twice = [MemorySnapshot(dict(z), name=skrl_name(0)), MemorySnapshot(dict(z), name=skrl_name(0))]
    assert memory_series(twice) == [[0], [1]]  # one export imported twice is not joined to itself
    other = MemorySnapshot({"observations": np.zeros((4, 3, 1), np.float32)}, name=skrl_name(3))
    assert memory_series([snaps[0], other]) == [[0], [1]]  # other envs: another memory


def test_two_exports_unroll_as_the_one_buffer_they_split():
    played = play(exports=2)
    snaps = [MemorySnapshot(dict(t), name=skrl_name(i), is_full=True, write_pointer=0, env_pointer=0)
             for i, t in enumerate(played.exports)]
    whole = MemorySnapshot({k: np.concatenate([t[k] for t in played.exports]) for k in played.exports[0]},
                           name="whole", is_full=True, write_pointer=0, env_pointer=0)
    episodes, steps = unroll_series(snaps, run_id="r", snapshot_ids=[0, 1])
    want_eps, want_steps = unroll_series([whole], run_id="r")
    assert steps.equals(want_steps)
    cols = [c for c in episodes.column_names if c not in ("metadata", "metadata_types")]
    assert episodes.select(cols).equals(want_eps.select(cols))
    assert episodes.num_rows > 10


def ppo_exports(played: Played, *, gamma: float = 0.99, lam: float = 0.95) -> list[dict[str, np.ndarray]]:
    """``played``'s exports as skrl's PPO writes them: no next observations; ``values`` of the rollout,
    ``returns`` and ``advantages`` of the rollout before it (its update runs after the export)."""
    out = []
    computed = None
    for tensors in played.exports:
        values = tensors["observations"].sum(axis=2, keepdims=True).astype(np.float32)
        last = tensors["next_observations"][-1].sum(axis=1, keepdims=True)
        rewards, ended = tensors["rewards"], tensors["terminated"]
        adv, running = np.zeros_like(values), np.zeros_like(last)
        for i in reversed(range(len(values))):
            following = values[i + 1] if i < len(values) - 1 else last
            running = rewards[i] - values[i] + gamma * ~ended[i] * (following + lam * running)
            adv[i] = running
        row = {k: v for k, v in tensors.items() if k != "next_observations"} | {"values": values}
        nan = np.full_like(values, np.nan)
        row |= {"returns": nan, "advantages": nan} if computed is None else computed
        out.append(row)
        computed = {"returns": adv + values,
                    "advantages": ((adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)).astype(np.float32)}
    return out


def test_without_next_states_ppo_advantages_show_a_missing_export(tmp_path):
    played = play(exports=6, mode="same-step")
    played.exports = ppo_exports(played)
    report = import_memory([export(played, tmp_path / "all")], tmp_path / "whole", episodes=True,
                           progress=False)
    assert not any("consecutive" in a or "cannot be seen" in a for a in report.assumptions)
    report = import_memory([export(played, tmp_path / "lost", skip=(3,))], tmp_path / "s", episodes=True,
                           progress=False)
    said = [a for a in report.assumptions if "not consecutive" in a]
    assert len(said) == 1 and skrl_name(2) in said[0] and skrl_name(4) in said[0], report.assumptions
    assert "returns and advantages" in said[0]
    for env, rows in unrolled(tmp_path / "s").items():
        assert sum(r["meta"].get("partial_start_at") == "gap" for r in rows) == 1
        truth = played.episodes[env]
        assert all(w in truth for w in complete(rows)), env  # none glued across the missing rows


def test_a_memory_whose_gaps_cannot_be_seen_says_so(tmp_path):
    played = play(exports=4, mode="same-step")
    report = import_memory([export(played, tmp_path, drop=("next_observations",))], tmp_path / "s",
                           episodes=True, progress=False)
    said = [a for a in report.assumptions if "cannot be seen" in a]
    assert len(said) == 1 and "4 exports" in said[0] and "no next_states" in said[0], report.assumptions
