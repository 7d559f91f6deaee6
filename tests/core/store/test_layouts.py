"""One store for a whole project: a table holds runs whose tensors differ, one layout each."""

from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rlarrow
from rlarrow.core.errors import RLArrowWarning, SchemaMismatchError
from rlarrow.core.store import MANIFEST_NAME

N = 6  # rows of each memory


def memory(run: str, algo: str, seed: int = 0) -> dict:
    """A PPO-like or DQN-like memory: different tensor sets over the same observations."""
    rng = np.random.default_rng(seed)
    rows = {"run_id": run, "snapshot_id": 0, "memory_index": np.arange(N), "env_index": 0,
            "memory_size": N, "num_envs": 1, "states": rng.standard_normal((N, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, (N, 1)).astype(np.int64)}
    if algo == "ppo":
        for name in ("log_prob", "values", "returns", "advantages"):
            rows[name] = rng.standard_normal((N, 1)).astype(np.float32)
    else:
        rows["next_states"] = rng.standard_normal((N, 4)).astype(np.float32)
    return rows


def episode(run: str, obs: np.ndarray, episode_id: int = 0) -> dict:
    """Steps of one episode (RLDS alignment) with the given observations."""
    n = len(obs)
    return {"run_id": run, "episode_id": episode_id, "step": np.arange(n), "env_index": 0,
            "observation": obs, "action": [1] * (n - 1) + [None], "reward": [1.0] * (n - 1) + [None],
            "is_first": [True] + [False] * (n - 1), "is_last": [False] * (n - 1) + [True],
            "is_terminal": [False] * (n - 1) + [True]}


def cartpole(n: int = 5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def pixels(n: int = 5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (n, 84, 84, 3), dtype=np.uint8)


@pytest.fixture
def project(tmp_path):
    """A store with a PPO and a DQN memory, and CartPole and pixel episodes."""
    st = rlarrow.Store.create(tmp_path / "project.rlarrow")
    st.append("memory", memory("ppo", "ppo", seed=1))
    st.append("memory", memory("dqn", "dqn", seed=2))
    st.append("steps", episode("cartpole", cartpole(seed=3)))
    st.append("steps", episode("pixels", pixels(seed=4)))
    return st


def test_each_run_keeps_its_layout_and_reads_back_exactly(project):
    st = project
    got = [(x.layout, x.directory, x.run_ids, x.rows) for x in st.layouts("memory")]
    assert got == [(1, "memory", ["ppo"], N), (2, "memory.2", ["dqn"], N)]
    assert [(x.directory, x.run_ids) for x in st.layouts("steps")] == [("steps", ["cartpole"]),
                                                                        ("steps.2", ["pixels"])]
    assert sorted(p.name for p in st.path.iterdir() if p.name.startswith(("memory", "steps"))) == \
        ["memory", "memory.2", "steps", "steps.2"]
    manifest = json.loads((st.path / MANIFEST_NAME).read_text())
    assert manifest["format_version"] == "1.4" and {"memory.2", "steps.2"} <= set(manifest["tables"])
    for run, algo, seed in (("ppo", "ppo", 1), ("dqn", "dqn", 2)):
        n = st.layout_of("memory", run)
        table = st.read("memory", layout=n)
        want = memory(run, algo, seed)
        for name in ("states", "actions", "log_prob", "next_states"):
            if name in want:
                assert np.array_equal(rlarrow.core.tensors.to_numpy(table.column(name)), want[name]), name
            else:
                assert name not in table.column_names  # each layout has its own tensors
    obs = {"cartpole": cartpole(seed=3), "pixels": pixels(seed=4)}
    for run, expected in obs.items():
        table = st.read("steps", layout=st.layout_of("steps", run))
        assert np.array_equal(rlarrow.core.tensors.to_numpy(table.column("observation")), expected)
    # every layout directory is one exact schema any Parquet engine globs
    for x in st.layouts("steps"):
        assert all(pq.read_schema(f).remove_metadata().equals(x.schema)
                   for f in st.files("steps", layout=x.layout))
    assert st.row_count("steps") == 10 and st.row_count("steps", layout=2) == 5
    assert rlarrow.Store.open(st.path).tables() == list(rlarrow.core.schema.TABLE_NAMES)


def test_read_together_unions_by_name_and_leaves_out_clashing_columns(project):
    st = project
    mem = st.read("memory")  # the same observations' types: nothing left out
    assert mem.num_rows == 2 * N and mem.column("run_id").to_pylist() == ["ppo"] * N + ["dqn"] * N
    assert mem.column("log_prob").null_count == N and mem.column("next_states").null_count == N
    with pytest.warns(RLArrowWarning, match=r"observation \(layout 1 \(steps/\) has float32 \(4,\)"):
        steps = st.read("steps")
    assert "observation" not in steps.column_names and steps.num_rows == 10
    st.read("steps")  # said once
    with pytest.raises(SchemaMismatchError, match=r"observation: layout 1 \(steps/\) has float32 \(4,\); "
                                                  r"layout 2 \(steps.2/\) has uint8 \(84, 84, 3\)"):
        st.read("steps", columns=["run_id", "observation"])
    with pytest.raises(rlarrow.StoreError, match="no layout 3"):
        st.read("steps", layout=3)


def test_a_run_spanning_layouts_is_refused_one_line_per_column(project):
    st = project
    before = (st.path / MANIFEST_NAME).read_bytes()
    with pytest.raises(SchemaMismatchError) as info:
        st.append("steps", episode("cartpole", pixels(), episode_id=1))
    text = str(info.value)
    assert "observation: store has float32 (4,), data has uint8 (84, 84, 3)" in text
    assert "run(s) ['cartpole'] already have rows of 'steps' in layout 1 (steps/)" in text
    assert "schema:\n" not in text and "action:" not in text  # only the columns that differ
    assert isinstance(info.value.expected, pa.Schema) and isinstance(info.value.got, pa.Schema)
    with pytest.raises(SchemaMismatchError, match=r"next_states: store has no such column"):
        st.append("memory", memory("ppo", "dqn"))  # a PPO run cannot take a DQN memory
    with pytest.raises(SchemaMismatchError, match="different layouts"):  # one file, one layout
        st.append("memory", {**memory("ppo", "ppo"), "run_id": ["ppo", "dqn"] * (N // 2)})
    # a writer that chose a layout keeps it, even for another run
    with st.writer("steps") as w:
        w.write(episode("new", cartpole()))
        with pytest.raises(SchemaMismatchError, match="in layout 2"):
            w.write(episode("pixels", cartpole(), episode_id=1))
        w.abort()
    assert (st.path / MANIFEST_NAME).read_bytes() == before
    st.append("steps", episode("cartpole", cartpole(), episode_id=1))  # its own layout: fine
    st.append("steps", episode("pixels2", pixels()))  # a new run goes to the layout of its types
    assert [x.run_ids for x in st.layouts("steps")] == [["cartpole"], ["pixels", "pixels2"]]


def test_declare_keeps_refusing_other_types_unless_asked_for_a_layout(project):
    st = project
    binary = rlarrow.core.tensors.tensor_type("uint8", (84, 84, 3), layout="binary")
    with pytest.raises(SchemaMismatchError, match="new_layout=True"):
        st.declare("steps", {"observation": binary, "action": pa.int64()})
    st.declare("steps", {"observation": binary, "action": pa.int64()}, new_layout=True)
    assert [x.rows for x in st.layouts("steps")] == [5, 5, 0]
    st.declare("steps", {"observation": binary, "action": pa.int64()})  # an existing layout: a no-op
    assert len(st.layouts("steps")) == 3


def test_gym_recordings_go_to_the_layout_of_their_spaces(tmp_path):
    gym = pytest.importorskip("gymnasium")
    import rlarrow.record.gym

    class Pixels(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self.observation_space.sample(), {}

        def step(self, action):
            self.t += 1
            return self.observation_space.sample(), 1.0, self.t >= 4, False, {}

    def play(env, steps=12):
        env.reset(seed=0)
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
        env.close()

    path = tmp_path / "s.rlarrow"
    play(rlarrow.record.gym.RecordEpisodes(gym.make("CartPole-v1"), path))
    play(rlarrow.record.gym.RecordEpisodes(Pixels(), path))  # a new layout, nothing declared by hand
    play(rlarrow.record.gym.RecordEpisodes(gym.make("CartPole-v1"), path))  # back to the first
    st = rlarrow.Store.open(path)
    layouts = st.layouts("steps")
    assert [len(x.run_ids) for x in layouts] == [2, 1] and all(x.rows >= 12 for x in layouts)
    frames = st.read("steps", layout=2, columns=["observation"]).column("observation")
    assert rlarrow.core.tensors.to_numpy(frames).shape[1:] == (84, 84, 3)


def test_sql_has_a_view_per_layout_and_one_over_all(project):
    with pytest.warns(RLArrowWarning, match=r"leave out observation .*`steps_1`, `steps_2`"):
        con = rlarrow.query.connect(project)
    assert con.sql("select count(*) from steps_1").fetchall()[0] == (5,)
    assert con.sql("select count(*) from steps_2").fetchall()[0] == (5,)
    assert con.sql("select run_id, count(*) from steps group by 1 order by 1").fetchall() == [
        ("cartpole", 5), ("pixels", 5)]
    assert "observation" not in con.sql("select * from steps").columns  # types differ
    assert con.sql("select count(*) from transitions").fetchall()[0] == (8,)
    assert len(con.sql("select observation from transitions_1").fetchall()[0][0]) == 4
    ppo = con.sql("select count(log_prob), count(next_states) from memory where run_id = 'ppo'").fetchall()[0]
    assert ppo == (N, 0)
    assert con.sql("select count(*) from memory_2").fetchall()[0] == (N,)
    con.close()
    # a store with one layout has the views it always had
    single = rlarrow.Store.create(project.path.parent / "single")
    single.append("memory", memory("ppo", "ppo"))
    names = {r[0] for r in rlarrow.query.connect(single).sql("show tables").fetchall()}
    assert "memory" in names and "memory_1" not in names


def test_scan_per_layout_and_together(project):
    pytest.importorskip("polars")
    together = rlarrow.query.scan(project, "memory").collect()
    assert together.height == 2 * N and {"log_prob", "next_states"} <= set(together.columns)
    assert rlarrow.query.scan(project, "memory", layout=2).collect()["run_id"].to_list() == ["dqn"] * N
    with pytest.warns(RLArrowWarning, match="observation"):
        steps = rlarrow.query.scan(project, "steps").collect()
    assert steps.height == 10 and "observation" not in steps.columns
    eps = {e["run_id"]: e["observation"].shape for e in rlarrow.query.iter_episodes(project)}
    assert eps == {"cartpole": (5, 4), "pixels": (5, 84, 84, 3)}  # each run from its layout


def test_streaming_dataset_per_layout_and_together(project):
    pytest.importorskip("torch")
    from rlarrow.train.torch import StreamingDataset, TableDataset

    ds = StreamingDataset(project, "memory", layout=1, batch_size=N, shuffle=False)
    (batch,) = list(ds)
    assert set(batch) >= {"log_prob", "advantages"} and tuple(batch["states"].shape) == (N, 4)
    both = list(StreamingDataset(project, "memory", batch_size=2 * N, shuffle=False))
    assert len(both) == 1 and "log_prob" not in both[0] and tuple(both[0]["states"].shape) == (2 * N, 4)
    with pytest.raises(KeyError, match="not in every layout"):
        StreamingDataset(project, "memory", columns=["log_prob"])
    pix = list(StreamingDataset(project, "transitions", layout=2, batch_size=4, shuffle=False))
    assert tuple(pix[0]["next_observation"].shape) == (4, 84, 84, 3)
    assert len(TableDataset(project, "memory", layout=2)) == N


def test_compaction_recovery_and_info_with_layouts(project, tmp_path):
    st = project
    for i in range(3):
        st.append("memory", memory(f"dqn{i}", "dqn", seed=i))
    assert len(st.files("memory", layout=2)) == 4
    assert st.compact("memory") == {"memory.2": (4, 1)}
    assert [x.run_ids for x in st.layouts("memory")][1] == ["dqn", "dqn0", "dqn1", "dqn2"]
    assert st.check() == []
    info = st.info()
    assert info.tables["memory.2"].rows == 4 * N and "next_states" in info.tables["memory.2"].tensors
    from click.testing import CliRunner

    from rlarrow.cli.commands import cli

    out = CliRunner().invoke(cli, ["info", os.fspath(st.path)])
    assert out.exit_code == 0, out.output
    assert re.search(r"^memory\.2\s+24\s+1\b", out.output, re.M), out.output
    # a writer killed after renaming its file into a layout directory: the next open adopts it
    src = st.files("memory", layout=2)[0]
    orphan = src.parent / "part-20990101T000000000000-0badf00d.parquet"
    shutil.copyfile(src, orphan)
    reopened = rlarrow.Store.open(st.path)
    assert reopened.row_count("memory", layout=2) == 8 * N
    assert orphan.name in {f.name for f in reopened.files("memory", layout=2)}
    assert reopened.check() == []


def test_push_copies_layout_directories(project, tmp_path):
    from rlarrow.core.remote import RemoteStore, push

    push(project, f"file://{tmp_path}/copy", progress=False)
    copy = rlarrow.Store.open(tmp_path / "copy")
    assert [x.run_ids for x in copy.layouts("steps")] == [["cartpole"], ["pixels"]]
    assert copy.read("memory", layout=2).num_rows == N
    remote = RemoteStore(f"file://{tmp_path}/copy")  # read where it lies, per layout or together
    assert remote.layouts("memory") == [1, 2]
    assert remote.read("memory", layout=2).equals(project.read("memory", layout=2))
    together = remote.read("memory")
    assert together.num_rows == 2 * N and set(together.column_names) == set(project.schema("memory").names)
    frames = remote.read("steps", layout=2, columns=["observation"]).column("observation")
    assert rlarrow.core.tensors.to_numpy(frames).shape[1:] == (84, 84, 3)
    with pytest.raises(rlarrow.StoreError, match="no layout 3"):
        remote.files("steps", layout=3)


@pytest.mark.slow
def test_ray_reads_each_layout_and_together(project):
    ray = pytest.importorskip("ray")
    import rlarrow.train.ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False,
             object_store_memory=256 << 20)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        assert rlarrow.train.ray.read(project, "memory", layout=2).count() == N
        together = rlarrow.train.ray.read(project, "memory").take_all()
        assert len(together) == 2 * N
        assert {r["run_id"] for r in together if r["log_prob"] is None} == {"dqn"}
        samples = rlarrow.train.ray.read_samples(project, "steps", layout=2).take_all()
        assert len(samples) == 5 and samples[0]["observation"].shape == (84, 84, 3)
        # a dataset of new runs' pixel steps is written to the pixel layout
        rows = project.read("steps", layout=2).set_column(0, "run_id", pa.array(["px2"] * 5))
        rlarrow.train.ray.write(ray.data.from_arrow(rows), project, "steps")
        assert project.layout_of("steps", "px2") == 2 and len(project.layouts("steps")) == 2
    finally:
        ray.shutdown()
