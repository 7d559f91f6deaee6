"""Statistics stored with every commit of steps, merged for any selection (issue 20).

Each test compares what the store answers with NumPy over the values themselves: the
moments to float tolerance, the quantiles to within the KLL sketch's stated rank error.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import rlarrow
from rlarrow.core.errors import ArgumentError, CorruptFileError
from rlarrow.core.stored_stats import combine_stored
from rlarrow.query.dataset_stats import lerobot_stats, stats

pytest.importorskip("datasketches",
                    reason="quantile sketches need datasketches: pip install 'rlarrow[stats]'")


def _assert_quantiles(got: rlarrow.core.stats.ColumnStats, values: np.ndarray) -> None:
    """Every element's q01..q99 is within the sketch's rank error of the values' own."""
    tol = got.normalized_rank_error()
    flat = values.reshape(len(values), -1)
    for q in (0.01, 0.1, 0.5, 0.9, 0.99):
        est = got.quantile(q).reshape(-1)
        for j in range(flat.shape[1]):
            col = flat[:, j][~np.isnan(flat[:, j])]
            below, at = float(np.mean(col < est[j])), float(np.mean(col <= est[j]))
            assert below - tol <= q <= at + tol, (q, j, est[j], below, at, tol)


def _assert_moments(got: rlarrow.core.stats.ColumnStats, values: np.ndarray) -> None:
    x = values.astype(np.float64)
    assert got.count == len(x)
    np.testing.assert_allclose(got.mean, np.nanmean(x, axis=0), rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(got.std, np.nanstd(x, axis=0), rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(got.min, np.nanmin(x, axis=0))
    np.testing.assert_array_equal(got.max, np.nanmax(x, axis=0))
    np.testing.assert_array_equal(got.nan_count, np.isnan(x).sum(axis=0))


class Recorded:
    """Runs appended commit by commit, episodes spanning commits; the values kept apart."""

    def __init__(self, store: rlarrow.Store, runs: dict[str, float], commits: int = 4, rows: int = 400,
                 seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.rows: list[dict] = []  # one per step: run, episode, observation, action
        for run, offset in runs.items():
            episode, step = 0, 0
            for _ in range(commits):
                eps, steps = [], []
                for _ in range(rows):
                    eps.append(episode)
                    steps.append(step)
                    step += 1
                    if rng.random() < 0.03:
                        episode, step = episode + 1, 0
                obs = (rng.normal(size=(rows, 2, 3)) * 3 + offset).astype(np.float32)
                obs[rng.random(rows) < 0.02, 1, 2] = np.nan
                action = rng.integers(-5, 5, size=(rows, 2)).astype(np.int64)
                store.append("steps", {"run_id": run, "episode_id": eps, "step": steps, "env_index": 0,
                                       "observation": obs, "action": action, "reward": rng.normal(size=rows),
                                       "is_first": np.array(steps) == 0, "is_last": False,
                                       "is_terminal": False})
                for i in range(rows):
                    self.rows.append({"run": run, "episode": eps[i], "observation": obs[i],
                                      "action": action[i]})
        self.episodes = sorted({(r["run"], r["episode"]) for r in self.rows})
        store.append("episodes", {"run_id": [e[0] for e in self.episodes],
                                  "episode_id": [e[1] for e in self.episodes],
                                  "num_steps": 1, "env_index": 0, "terminated": True, "truncated": False,
                                  "partial_start": False, "partial_end": False,
                                  "metadata": [{"split": "val" if e[1] % 5 == 0 else "train"}
                                               for e in self.episodes]})

    def values(self, column: str, keep=lambda row: True) -> np.ndarray:
        return np.stack([r[column] for r in self.rows if keep(r)])


@pytest.fixture
def recorded(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s.rlarrow")
    return store, Recorded(store, {"a": 0.0, "b": 100.0, "c": -40.0})


def test_every_commit_of_steps_stores_its_statistics_in_the_same_commit(recorded):
    store, _ = recorded
    assert store.row_count("stats") > 0
    steps_commits = [h for h in store.history() if "steps" in h.get("tables", {})]
    stats_table = store.read("stats")
    blocks = set(stats_table.column("block").to_pylist())
    assert len(blocks) == 12  # 3 runs x 4 commits: each commit's block
    seg = stats_table.filter(pc.and_(pc.is_valid(stats_table.column("episode_id")),
                                     pc.equal(stats_table.column("column"), "reward")))
    assert pc.sum(seg.column("rows")).as_py() == store.row_count("steps")
    assert steps_commits is not None


def test_merged_statistics_of_every_selection_equal_numpy(recorded):
    store, rec = recorded
    everything = stats(store)
    assert sorted(everything) == ["action", "discount", "observation", "reward"]
    for column in ("observation", "action"):
        _assert_moments(everything[column], rec.values(column))
        _assert_quantiles(everything[column], rec.values(column))
    assert everything["observation"].shape == (2, 3)
    one_run = stats(store, runs=["b"])
    _assert_moments(one_run["observation"], rec.values("observation", lambda r: r["run"] == "b"))
    _assert_quantiles(one_run["observation"], rec.values("observation", lambda r: r["run"] == "b"))
    # an episode-level split: blocks partly selected are read again for the quantiles
    train = stats(store, where="metadata->>'split' = 'train'")
    in_train = lambda r: r["episode"] % 5 != 0  # noqa: E731
    _assert_moments(train["observation"], rec.values("observation", in_train))
    _assert_quantiles(train["observation"], rec.values("observation", in_train))
    picked = [rec.episodes[3], rec.episodes[40], rec.episodes[-1]]
    some = stats(store, episodes=picked)
    _assert_moments(some["action"], rec.values("action", lambda r: (r["run"], r["episode"]) in picked))


def test_moments_only_and_one_column(recorded):
    store, rec = recorded
    got = stats(store, columns=["action"], quantiles=False)
    assert list(got) == ["action"] and not got["action"].has_quantiles
    _assert_moments(got["action"], rec.values("action"))
    with pytest.raises(Exception, match="quantile"):
        got["action"].quantile(0.5)


def test_a_weighted_mixture_of_runs(recorded):
    store, rec = recorded
    got = stats(store, weights={"a": 3.0, "b": 1.0}, columns=["observation"])["observation"]
    mean_a = np.nanmean(rec.values("observation", lambda r: r["run"] == "a").astype(np.float64), axis=0)
    mean_b = np.nanmean(rec.values("observation", lambda r: r["run"] == "b").astype(np.float64), axis=0)
    np.testing.assert_allclose(got.mean, 0.75 * mean_a + 0.25 * mean_b, rtol=1e-9)
    # the mixture's median lies between the two runs (offsets 0 and 100), near run a's
    assert np.all(got.quantile(0.5) < 50)
    with pytest.raises(ArgumentError, match="no steps"):
        stats(store, weights={"nope": 1.0})


def test_deleted_episodes_leave_the_statistics_and_come_back_at_an_earlier_version(recorded):
    store, rec = recorded
    before = store.version
    gone = [e for e in rec.episodes if e[0] == "a" and e[1] % 2 == 0]
    store.delete(episodes=gone)
    kept = lambda r: not (r["run"] == "a" and r["episode"] % 2 == 0)  # noqa: E731
    after = stats(store)
    _assert_moments(after["observation"], rec.values("observation", kept))
    _assert_quantiles(after["observation"], rec.values("observation", kept))
    again = stats(store, version=before)
    _assert_moments(again["observation"], rec.values("observation"))
    store.delete(runs=["c"])
    _assert_moments(stats(store)["action"], rec.values("action", lambda r: kept(r) and r["run"] != "c"))


def test_steps_written_without_statistics_are_read_from_the_data(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s.rlarrow")
    store.step_stats = "off"
    rec = Recorded(store, {"a": 0.0}, commits=2)
    assert store.row_count("stats") == 0
    store.step_stats = "sketches"
    rec2 = Recorded(store, {"b": 5.0}, commits=2, seed=1)
    both = np.concatenate([rec.values("observation"), rec2.values("observation")])
    got = stats(store)
    _assert_moments(got["observation"], both)
    _assert_quantiles(got["observation"], both)
    _assert_moments(stats(store, runs=["a"])["observation"], rec.values("observation"))


def test_a_large_parallel_append_stores_statistics_too(tmp_path, monkeypatch):
    from rlarrow.core.store import files as store_files

    monkeypatch.setattr(store_files, "ROW_GROUP_BYTES", 4096)  # so that a small table is "large"
    store = rlarrow.Store.create(tmp_path / "s.rlarrow")
    rng = np.random.default_rng(5)
    n = 5000
    obs = rng.normal(size=(n, 4)).astype(np.float32)
    table = rlarrow.core.schema.build("steps", {"run_id": "r", "episode_id": np.arange(n) // 50,
                                                "step": np.arange(n) % 50, "env_index": 0, "observation": obs,
                                                "is_first": np.arange(n) % 50 == 0, "is_last": False,
                                                "is_terminal": False})
    info = store.append("steps", table, threads=4)
    assert len(info.files) > 1
    assert store.row_count("stats") > 0
    _assert_moments(stats(store)["observation"], obs)


def test_dict_observations_have_statistics_per_leaf(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s.rlarrow")
    rng = np.random.default_rng(2)
    state = rng.normal(size=(30, 3)).astype(np.float32)
    grip = rng.integers(0, 2, size=30).astype(bool)
    image = rng.integers(0, 255, size=(30, 64, 64, 3), dtype=np.uint8)
    store.append("steps", {"run_id": "r", "episode_id": 0, "step": np.arange(30), "env_index": 0,
                           "observation": {"state": state, "grip": grip, "image": image},
                           "is_first": np.arange(30) == 0, "is_last": False, "is_terminal": False})
    got = stats(store)
    assert "observation.state" in got and "observation.grip" in got
    assert "observation.image" not in got  # 12,288 elements: wider than MOMENTS_MAX_ELEMENTS
    _assert_moments(got["observation.state"], state)
    assert got["observation.grip"].mean.tolist() == pytest.approx(grip.mean())


def test_merge_brings_the_statistics_along(tmp_path):
    a = rlarrow.Store.create(tmp_path / "a.rlarrow")
    rec_a = Recorded(a, {"a": 0.0}, commits=2)
    b = rlarrow.Store.create(tmp_path / "b.rlarrow")
    rec_b = Recorded(b, {"b": 9.0}, commits=2, seed=3)
    a.merge(b)
    both = np.concatenate([rec_a.values("action"), rec_b.values("action")])
    _assert_moments(stats(a)["action"], both)
    assert a.row_count("stats") == a.read("stats").num_rows > b.row_count("stats")


def test_a_damaged_stats_row_is_named_not_merged(recorded, tmp_path):
    store, _ = recorded
    path = store.files("stats")[0]
    table = pq.read_table(path)
    mean = table.column("mean").to_pylist()
    mean[0] = mean[0][:-1]  # one element short
    field = table.schema.field("mean")
    table = table.set_column(table.schema.get_field_index("mean"), field, pa.array(mean, field.type))
    pq.write_table(table, path)
    with pytest.raises(CorruptFileError, match=r"stats.*mean"):
        stats(store, quantiles=False)


def test_shapes_that_differ_between_layouts_ask_for_a_layout(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s.rlarrow")
    for run, width in (("a", 3), ("b", 5)):
        store.append("steps", {"run_id": run, "episode_id": 0, "step": np.arange(4), "env_index": 0,
                               "observation": np.ones((4, width), np.float32), "is_first": np.arange(4) == 0,
                               "is_last": False, "is_terminal": False})
    # all runs: every column but the clashing one, which a warning names (as the SQL views do) ...
    with pytest.warns(rlarrow.RLArrowWarning, match=r"leave out observation .*layout=N"):
        assert "observation" not in stats(store)
    with pytest.raises(ArgumentError, match="layout=N"):  # ... and asked for by name, a layout is needed
        stats(store, columns=["observation"])
    assert stats(store, layout=2)["observation"].shape == (5,)
    assert stats(store, columns=["reward"])["reward"].count == 0


def test_the_cli_writes_lerobot_stats_json(recorded, tmp_path):
    store, rec = recorded
    out = tmp_path / "stats.json"
    result = CliRunner().invoke(rlarrow.cli.cli, ["stats", str(store.path), "--where",
                                                  "metadata->>'split' = 'train'", "-o", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert set(data["observation"]) == {"mean", "std", "min", "max", "count",
                                        "q01", "q10", "q50", "q90", "q99"}
    train = rec.values("observation", lambda r: r["episode"] % 5 != 0).astype(np.float64)
    np.testing.assert_allclose(np.array(data["observation"]["mean"]), np.nanmean(train, axis=0), rtol=1e-9)
    assert data["observation"]["count"] == [len(train)]
    assert np.array(data["action"]["q50"]).shape == (2,)
    result = CliRunner().invoke(rlarrow.cli.cli, ["stats", str(store.path), "--weight", "a=1",
                                                  "--weight", "b=1", "--column", "action", "--no-quantiles"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert list(printed) == ["action"] and "q50" not in printed["action"]
    result = CliRunner().invoke(rlarrow.cli.cli, ["stats", str(store.path), "--weight", "a"])
    assert result.exit_code == 2 and "RUN_ID=WEIGHT" in result.output
    result = CliRunner().invoke(rlarrow.cli.cli, ["stats", str(store.path), "--run", "zzz"])
    assert result.exit_code == 1 and "no steps" in result.output


def test_lerobot_shape_of_a_scalar_column(recorded):
    store, _ = recorded
    reward = lerobot_stats(stats(store, columns=["reward"]))["reward"]
    assert len(reward["mean"]) == 1 and len(reward["q99"]) == 1


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="needs torch: pip install 'rlarrow[torch]'")
def test_streaming_dataset_normalizes_with_the_stored_statistics(recorded):
    from rlarrow.train.torch import StreamingDataset

    store, rec = recorded
    ds = StreamingDataset(store.path, normalize="mean_std", batch_size=100_000, shuffle=False,
                          columns=["observation", "action", "reward"])
    assert sorted(ds.stats) == ["action", "observation"]
    batch = next(iter(ds))
    obs = batch["observation"].numpy().astype(np.float64)
    np.testing.assert_allclose(np.nanmean(obs, axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(np.nanstd(obs, axis=0), 1.0, atol=1e-5)
    raw = store.read("steps", columns=["reward"]).column("reward").to_numpy()
    np.testing.assert_array_equal(batch["reward"].numpy(), raw)  # not normalised unless asked
    ds = StreamingDataset(store.path, normalize={"action": "min_max"}, batch_size=100_000, shuffle=False,
                          columns=["action"])
    action = next(iter(ds))["action"].numpy()
    assert action.min() == pytest.approx(-1.0) and action.max() == pytest.approx(1.0, abs=1e-6)
    train = stats(store, where="metadata->>'split' = 'train'")
    ds = StreamingDataset(store.path, normalize="quantile", stats=train, batch_size=100_000, shuffle=False,
                          columns=["observation"])
    assert ds.stats["observation"] is train["observation"]
    with pytest.raises(ArgumentError, match="no statistics"):
        StreamingDataset(store.path, normalize={"observation.image": "mean_std"})
    with pytest.raises(ArgumentError, match="normalize="):
        StreamingDataset(store.path, stats=train)
    del rec


@pytest.mark.skipif(importlib.util.find_spec("gymnasium") is None,
                    reason="needs gymnasium: pip install gymnasium")
def test_a_recorded_gymnasium_run_has_the_statistics_of_what_the_env_returned(tmp_path):
    """CartPole with a random policy, 3,000 steps over several flushes: the stored statistics
    equal NumPy over the observations and actions the environment itself gave."""
    import gymnasium as gym

    from rlarrow.record.gym import RecordEpisodes

    env = RecordEpisodes(gym.make("CartPole-v1"), tmp_path / "s", flush_every_steps=700)
    rng = np.random.default_rng(0)
    observations, actions = [], []
    obs, _ = env.reset(seed=1)
    observations.append(obs)
    for _ in range(3000):
        action = int(rng.integers(2))
        obs, _, term, trunc, _ = env.step(action)
        actions.append(action)
        observations.append(obs)
        if term or trunc:
            obs, _ = env.reset()
            observations.append(obs)
    env.close()
    store = rlarrow.Store.open(tmp_path / "s")
    got = stats(store)
    _assert_moments(got["observation"], np.stack(observations))
    _assert_quantiles(got["observation"], np.stack(observations))
    _assert_moments(got["action"], np.array(actions)[:, None].reshape(-1))
    assert len(set(store.read("stats").column("block").to_pylist())) >= 4
    mean_only = combine_stored(store, quantiles=False)
    np.testing.assert_allclose(mean_only["observation"].mean, got["observation"].mean)


# --- found by review: each of these failed before its fix -----------------------------------


def _rows(run, eps, obs, **extra):
    n = len(eps)
    return {"run_id": run, "episode_id": eps, "step": list(range(n)), "env_index": 0, "observation": obs,
            "reward": np.zeros(n), "is_first": [i == 0 for i in range(n)], "is_last": False,
            "is_terminal": False, **extra}


def test_an_episode_over_several_batches_of_one_commit_has_one_segment_row(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s.rlarrow")
    rng = np.random.default_rng(4)
    parts = []
    with store.writer("steps", row_group_bytes=500) as writer:  # each write spills a batch
        for i in range(3):
            x = rng.normal(size=(20, 2)) + 10 * i
            x[3, 1] = np.nan
            parts.append(x)
            writer.write(_rows("r", [0] * 10 + [i + 1] * 10, x))
    table = store.read("stats", filter=pc.field("column") == "observation")
    segments = table.filter(pc.is_valid(table.column("episode_id")))
    assert sorted(segments.column("episode_id").to_pylist()) == [0, 1, 2, 3]  # the key is unique
    episode_0 = np.concatenate([p[:10] for p in parts])
    _assert_moments(stats(store, episodes=[("r", 0)], quantiles=False)["observation"], episode_0)
    _assert_moments(stats(store)["observation"], np.concatenate(parts))


def test_merged_runs_are_counted_in_the_layout_their_steps_are_in(tmp_path):
    a = rlarrow.Store.create(tmp_path / "a.rlarrow")
    b = rlarrow.Store.create(tmp_path / "b.rlarrow")
    a.append("steps", _rows("a", [0, 0, 1], np.zeros((3, 2), np.float32)))
    b.append("steps", _rows("b", [0, 0, 1, 1], np.full((4, 2), 50.0)))  # float64: layout 2 once merged
    a.merge(b)
    assert a.read("steps", layout=2).num_rows == 4
    assert stats(a, layout=1)["observation"].count == 3
    assert stats(a, layout=2)["observation"].count == 4
    assert stats(a, layout=2)["observation"].quantile(0.5).tolist() == [50.0, 50.0]
    result = CliRunner().invoke(rlarrow.cli.cli, ["stats", str(a.path), "--layout", "2",
                                                  "--column", "observation"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["observation"]["count"] == [4]


def test_a_commit_between_the_reads_of_a_question_is_not_taken_for_damage(tmp_path, monkeypatch):
    import rlarrow.core.stored_stats as step_stats

    store = rlarrow.Store.create(tmp_path / "s.rlarrow")
    store.append("steps", _rows("r", [0, 0, 1, 1], np.zeros((4, 2))))
    store.append("steps", _rows("r", [1, 2], np.ones((2, 2))))
    original, raced = step_stats._blocks_for_quantiles, []

    def racing(*args, **kwargs):  # a recorder commits while the question is being answered
        out = original(*args, **kwargs)
        if not raced:
            raced.append(True)
            store.append("steps", _rows("r", [1, 1], np.full((2, 2), 7.0)))
        return out

    monkeypatch.setattr(step_stats, "_blocks_for_quantiles", racing)
    got = stats(store.path, episodes=[("r", 1)])["observation"]
    assert raced and got.count in (3, 5)  # one version's answer: before or after the commit
    assert got.valid_count.tolist() == [got.count, got.count]


def test_weights_of_zero_leave_a_run_out(recorded):
    store, rec = recorded
    got = stats(store, weights={"a": 1.0, "b": 0.0}, columns=["action"])["action"]
    np.testing.assert_allclose(got.mean, rec.values("action", lambda r: r["run"] == "a").mean(axis=0))
    with pytest.raises(ArgumentError, match="above 0"):
        stats(store, weights={"a": 0.0})


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="needs torch: pip install 'rlarrow[torch]'")
def test_normalize_reaches_dict_leaves_and_next_observations_and_pickles(tmp_path):
    import pickle

    from rlarrow.train.torch import StreamingDataset

    store = rlarrow.Store.create(tmp_path / "s.rlarrow")
    state = np.arange(18.0).reshape(6, 3) + 100
    store.append("steps", _rows("r", [0] * 6, {"state": state}, action=np.ones((6, 1))))
    ds = StreamingDataset(store.path, batch_size=6, shuffle=False, normalize="mean_std")
    assert sorted(ds.stats) == ["action", "observation.state"]
    np.testing.assert_allclose(next(iter(ds))["observation"]["state"].numpy().mean(axis=0), 0.0, atol=1e-9)
    flat = rlarrow.Store.create(tmp_path / "f.rlarrow")
    flat.append("steps", _rows("r", [0] * 6, state, action=np.ones((6, 1))))
    batch = next(iter(StreamingDataset(flat.path, "transitions", batch_size=5, shuffle=False,
                                       normalize="mean_std")))
    np.testing.assert_allclose(batch["next_observation"][0].numpy(), batch["observation"][1].numpy())
    # DataLoader workers under spawn pickle the dataset, normaliser included
    again = pickle.loads(pickle.dumps(ds))
    np.testing.assert_allclose(next(iter(again))["observation"]["state"].numpy(),
                               next(iter(ds))["observation"]["state"].numpy())
    by_quantile = pickle.loads(pickle.dumps(StreamingDataset(flat.path, normalize="quantile")))  # sketches
    assert by_quantile.stats["observation"].has_quantiles
    moments = rlarrow.Store.create(tmp_path / "m.rlarrow")
    moments.step_stats = "moments"
    moments.append("steps", _rows("r", [0] * 6, state, action=np.ones((6, 1))))
    with pytest.raises(ArgumentError, match="step_stats"):
        StreamingDataset(moments.path, normalize="quantile")


# --- found by a new user's trial: silent empty answers and confusing errors -----------------


def test_names_that_match_nothing_are_errors_not_empty_answers(recorded):
    store, _ = recorded
    with pytest.raises(ArgumentError, match=r"no statistics of column\(s\) \['observaton'\].*'observation'"):
        stats(store, columns=["observaton"])
    with pytest.raises(ArgumentError, match=r"no steps of run\(s\) \['nope'\]"):
        stats(store, runs=["nope"])
    with pytest.raises(ArgumentError, match=r"not among runs="):
        stats(store, runs=["a"], weights={"b": 1.0})
    assert list(stats(store, columns="action", quantiles=False)) == ["action"]  # one name as a string
    with pytest.raises(ArgumentError, match=r"not a filter DuckDB can run over the episodes.*run_id IN"):
        stats(store, where="metadata->>'split = 'train'")
    result = CliRunner().invoke(rlarrow.cli.cli, ["stats", str(store.path), "--where", "split = 'train'"])
    assert result.exit_code == 1 and "please report it" not in result.output and "episodes" in result.output
    result = CliRunner().invoke(rlarrow.cli.cli, ["stats", str(store.path), "--column", "observaton"])
    assert result.exit_code == 1 and "observaton" in result.output


def test_the_cli_counts_what_it_writes_and_says_when_quantiles_are_missing(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s.rlarrow")
    store.step_stats = "moments"
    store.append("steps", _rows("r", [0] * 6, np.arange(12.0).reshape(6, 2)))  # discount: all null
    out = tmp_path / "stats.json"
    result = CliRunner().invoke(rlarrow.cli.cli, ["stats", str(store.path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    written = json.loads(out.read_text())
    assert sorted(written) == ["observation", "reward"]  # discount holds no values: left out
    assert "2 column(s)" in result.stdout
    assert "no quantiles" in result.stderr and "step_stats" in result.stderr


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="needs torch: pip install 'rlarrow[torch]'")
def test_normalize_with_statistics_that_lack_a_column_says_so(recorded):
    from rlarrow.train.torch import StreamingDataset

    store, _ = recorded
    only_action = stats(store, columns=["action"])
    with pytest.raises(ArgumentError, match="nothing of 'observation'"):
        StreamingDataset(store.path, normalize="mean_std", stats=only_action)
    ds = StreamingDataset(store.path, normalize={"action": "mean_std"}, stats=only_action)
    assert sorted(ds.stats) == ["action"]


def test_a_wrong_step_stats_mode_is_refused_when_set(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s.rlarrow")
    with pytest.raises(ArgumentError, match="not one of"):
        store.step_stats = "moment"
    assert store.step_stats is None


def test_a_table_larger_than_one_piece_gives_the_same_segments(tmp_path, monkeypatch):
    import rlarrow.core.step_stats as step_stats

    monkeypatch.setattr(step_stats, "_ADD_ROWS", 7)  # episodes of 10 rows cut across pieces
    store = rlarrow.Store.create(tmp_path / "s.rlarrow")
    obs = np.random.default_rng(8).normal(size=(40, 3))
    store.append("steps", _rows("r", np.arange(40) // 10, obs))
    table = store.read("stats", filter=pc.field("column") == "observation")
    assert sorted(table.filter(pc.is_valid(table.column("episode_id"))).column("episode_id").to_pylist()) == \
        [0, 1, 2, 3]
    _assert_moments(stats(store, episodes=[("r", 2)])["observation"], obs[20:30])
    _assert_moments(stats(store)["observation"], obs)
