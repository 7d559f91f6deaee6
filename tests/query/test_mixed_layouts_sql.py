"""One store of runs whose tensors differ, and every SQL-using command over all of it.

Real data, made here: skrl 2 PPO (Pendulum-v1, float32 actions) and DQN (CartPole-v1, int64
actions) experiments converted with ``rlarrow convert runs/ --episodes``; two Minari datasets of
different spaces written by Minari; a D4RL file and a robomimic file (written by the peers'
converters, tests/fixtures/hdf5) merged with ``rlarrow merge``. Each store holds two steps
layouts whose ``observation`` or ``action`` types differ, which made every SQL view fail
(``Referenced column "action" not found``). What each test asserts against is read without
SQL: the peers' own files, and pyarrow reads of each layout.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from conftest import FIXTURES

import rlarrow
from rlarrow.cli import cli
from rlarrow.core.errors import RLArrowWarning
from rlarrow.query.views import widest as _widest

HAVE = {m: importlib.util.find_spec(m) is not None for m in ("skrl", "gymnasium", "torch", "minari", "h5py")}


def run_cli(*args: str, ok: bool = True):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, result.output
    return result


def truth(store: rlarrow.Store):
    """Per run, read with pyarrow layout by layout: rows, actions, reward sum, episode returns."""
    out: dict[str, dict] = {}
    for info in store.layouts("steps"):
        steps = store.read("steps", layout=info.layout)
        for run in info.run_ids:
            rows = steps.filter(pc.equal(steps["run_id"], run))
            rewards = rows["reward"].to_numpy(zero_copy_only=False)
            episodes, transitions = {}, 0
            for eid in np.unique(rows["episode_id"].to_numpy()):
                ep = rows.filter(pc.equal(rows["episode_id"], eid)).sort_by("step")
                acted = ep["action"].is_valid().to_numpy(zero_copy_only=False)
                episodes[int(eid)] = (int(acted.sum()),
                                      float(np.nansum(ep["reward"].to_numpy(zero_copy_only=False))))
                transitions += int(acted[:-1].sum())  # (an action needs a next row to make one)
            out[run] = {"layout": info.layout, "rows": rows.num_rows, "transitions": transitions,
                        "actions": rows.num_rows - rows["action"].null_count,
                        "reward": float(np.nansum(rewards)), "episodes": episodes}
    return out


def check_every_command(store_path: Path, tmp_path: Path, *, widened=(), left_out=()) -> dict:
    """sql, connect, check, plot and stats over a store of several steps layouts, against ``truth``."""
    store = rlarrow.Store.open(store_path)
    expect = truth(store)
    layouts = sorted({e["layout"] for e in expect.values()})
    assert len(layouts) == 2, "the data must make two steps layouts"

    # rlarrow.connect: the combined views work, and the warning names what they widen or leave out
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        con = rlarrow.connect(store_path)
    notes = [str(w.message) for w in caught if issubclass(w.category, RLArrowWarning)]
    steps_note = next(n for n in notes if "the runs of steps" in n)
    for name in left_out:
        assert f"leave out {name}" in steps_note or f", {name} (" in steps_note, steps_note
    for name in widened:
        assert f"{name} to " in steps_note, steps_note
    assert "--layout steps=" in steps_note and "steps_2" in steps_note
    columns = con.sql("select * from steps limit 0").columns
    assert not set(left_out) & set(columns) and set(widened) <= set(columns)
    got = {r: (n, s) for r, n, s in
           con.sql("select run_id, count(*), sum(reward) from steps group by all").fetchall()}
    assert got == {r: (e["rows"], pytest.approx(e["reward"])) for r, e in expect.items()}
    returns = {(r, e): (n, ret) for r, e, n, ret in
               con.sql('select run_id, episode_id, steps, "return" from episode_returns(1.0)').fetchall()}
    assert returns == {(r, e): (n, pytest.approx(ret)) for r, x in expect.items()
                       for e, (n, ret) in x["episodes"].items()}
    transitions = dict(con.sql("select run_id, count(*) from transitions group by all").fetchall())
    assert transitions == {r: e["transitions"] for r, e in expect.items()}
    for view in ("steps_decoded", "transitions_decoded", "memory_decoded"):
        con.sql(f"select * from {view}").fetchall()
    # per-layout views stay exact: each layout's own types and values
    for n in layouts:
        schema = store.schema("steps", layout=n)
        exact = store.read("steps", layout=n).sort_by([("run_id", "ascending"), ("episode_id", "ascending"),
                                                        ("step", "ascending")])
        for column in ("observation", "action"):
            rel = con.sql(f"select {column} from steps_{n} order by run_id, episode_id, step")
            table = rel.to_arrow_table()
            stored = exact[column]
            if isinstance(schema.field(column).type, pa.ExtensionType):  # binary layout: the bytes
                stored = pa.chunked_array([c.storage for c in stored.chunks],
                                          schema.field(column).type.storage_type)
            assert table.column(0).to_pylist() == stored.to_pylist(), (n, column)
            if pa.types.is_fixed_size_list(schema.field(column).type):  # and their dtype
                assert table.column(0).type.value_type == schema.field(column).type.value_type
        in_layout = {r: e for r, e in expect.items() if e["layout"] == n}
        one = rlarrow.connect(store_path, layout=n, warn=False)
        assert dict(one.sql("select run_id, count(action) from steps group by all").fetchall()) == {
            r: e["actions"] for r, e in in_layout.items()}
        assert dict(one.sql("select run_id, count(*) from transitions group by all").fetchall()) == {
            r: e["transitions"] for r, e in in_layout.items()}
        one.close()
    con.close()

    # rlarrow sql: a note on stderr, and --layout for one layout's exact columns
    result = run_cli("sql", store_path, "select run_id, count(*) as n, sum(reward) as r from steps "
                     "group by all", "--format", "json")
    assert "note:" in result.stderr and "--layout steps=" in result.stderr
    rows = {d["run_id"]: d["n"] for d in map(json.loads, result.stdout.splitlines())}
    assert rows == {r: e["rows"] for r, e in expect.items()}
    result = run_cli("sql", store_path, "select run_id, count(action) as n from steps group by all",
                     "--layout", f"steps={layouts[-1]}", "--format", "json")
    assert {d["run_id"]: d["n"] for d in map(json.loads, result.stdout.splitlines())} == {
        r: e["actions"] for r, e in expect.items() if e["layout"] == layouts[-1]}
    assert "the runs of steps" not in result.stderr
    bad = run_cli("sql", store_path, "select 1", "--layout", "steps=9", ok=False)
    assert bad.exit_code == 1 and "has no layout 9" in bad.output
    # rlarrow check reads every layout (its findings are the data's; none is a failure to read)
    report = run_cli("check", store_path, "--json", ok=False)
    assert report.exit_code in (0, 1), report.output
    assert "Binder" not in report.output and "unexpected" not in report.output
    data = json.loads(report.stdout)
    assert data["summary"]["checks"] if "summary" in data else data
    # rlarrow plot, of all runs and of one layout's
    run_cli("plot", store_path, "--episodes", "-o", tmp_path / "all.png")
    run_cli("plot", store_path, "--episodes", "--layout", str(layouts[0]), "-o", tmp_path / "one.png")
    assert (tmp_path / "all.png").stat().st_size > 0 and (tmp_path / "one.png").stat().st_size > 0
    # rlarrow stats: every layout's rewards, or one layout's
    stats = json.loads(run_cli("stats", store_path, "--column", "reward", "--no-quantiles").stdout)
    assert stats["reward"]["count"] == [sum(e["actions"] for e in expect.values())]
    assert stats["reward"]["mean"][0] == pytest.approx(sum(e["reward"] for e in expect.values())
                                                       / sum(e["actions"] for e in expect.values()))
    stats = json.loads(run_cli("stats", store_path, "--column", "action", "--no-quantiles",
                               "--layout", str(layouts[0])).stdout)
    assert stats["action"]["count"] == [sum(e["actions"] for e in expect.values()
                                            if e["layout"] == layouts[0])]
    return expect


@pytest.mark.slow  # (about 20 s: two skrl trainings, then every command)
@pytest.mark.skipif(not all(HAVE[m] for m in ("skrl", "gymnasium", "torch")),
                    reason="needs skrl 2, gymnasium and torch (test-only peers): "
                           "pip install skrl gymnasium torch")
def test_skrl_ppo_and_dqn_experiments_in_one_store(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from skrl_train import train_experiment

    runs = tmp_path / "runs"
    train_experiment("ppo", runs, "PPO_pendulum", timesteps=128)  # float32 (1,) actions, obs (3,)
    train_experiment("dqn", runs, "DQN_cartpole", timesteps=128)  # int64 (1,) actions, obs (4,)
    run_cli("convert", runs, "-o", tmp_path / "s", "--episodes")
    store = rlarrow.Store.open(tmp_path / "s")
    names = {r["run_id"]: r["name"] for r in store.runs().to_pylist()}
    expect = check_every_command(tmp_path / "s", tmp_path, left_out=("observation", "action"))
    # what skrl exported: every reward of its memories is a step's (a reset step's reward is 0)
    for run, e in expect.items():
        files = sorted((runs / names[run] / "memories").glob("*.npz"))
        assert len(files) == (2 if names[run] == "PPO_pendulum" else 1)
        total = sum(float(np.load(f)["rewards"].astype(np.float64).sum()) for f in files)
        assert e["reward"] == pytest.approx(total)
    # the memories too: combined without the clashing tensors, each layout exact
    con = rlarrow.connect(tmp_path / "s", warn=False)
    rows = dict(con.sql("select run_id, count(*) from memory group by all").fetchall())
    assert rows == {run: sum(np.load(f)["rewards"].shape[0] * np.load(f)["rewards"].shape[1]
                             for f in (runs / names[run] / "memories").glob("*.npz")) for run in expect}
    assert "actions" not in con.sql("select * from memory limit 0").columns
    for info in store.layouts("memory"):
        [run] = info.run_ids
        [f] = sorted((runs / names[run] / "memories").glob("*.npz"))[:1]
        actions = np.load(f)["actions"]  # (memory_size, num_envs, 1)
        blob = con.sql(f"select actions from memory_{info.layout}_decoded where snapshot_id = 0 "
                       "order by memory_index, env_index").fetchnumpy()["actions"]
        assert np.array_equal(np.stack(blob).astype(actions.dtype).reshape(actions.shape), actions)
    con.close()


@pytest.mark.skipif(not (HAVE["minari"] and HAVE["gymnasium"]),
                    reason="needs minari and gymnasium (test-only peers): "
                           "pip install 'minari>=0.5' gymnasium")
def test_two_minari_datasets_of_different_spaces_in_one_store(tmp_path, monkeypatch):
    import gymnasium as gym
    import minari

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "io"))
    from test_minari_shapes import make_dataset  # (Minari's own writer, from real envs' episodes)

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    written = {}
    for env_id in ("CartPole-v1", "Pendulum-v1"):  # Discrete int64 / Box float32 (1,) actions
        name = env_id.split("-")[0].lower()
        make_dataset(tmp_path / "minari", name, gym.make(env_id, max_episode_steps=20), "arrow")
        episodes = minari.load_dataset(f"rlarrow/{name}-v0").iterate_episodes()
        written[name] = [(len(ep.rewards), float(np.sum(ep.rewards))) for ep in episodes]
    for name in written:
        run_cli("convert", tmp_path / "minari" / "rlarrow" / f"{name}-v0", "-o", tmp_path / "s")
    expect = check_every_command(tmp_path / "s", tmp_path, left_out=("observation", "action"))
    store = rlarrow.Store.open(tmp_path / "s")
    got = sorted(sorted((n, round(r, 6)) for n, r in e["episodes"].values()) for e in expect.values())
    assert got == sorted(sorted((n, round(r, 6)) for n, r in eps) for eps in written.values())
    assert {str(i.schema.field("action").type) for i in store.layouts("steps")} >= {"int64"}


@pytest.mark.skipif(not HAVE["h5py"], reason="HDF5 import needs h5py: pip install 'rlarrow[hdf5]'")
def test_a_d4rl_store_merged_with_a_robomimic_store(tmp_path):
    import h5py

    d4rl, robomimic = FIXTURES / "hdf5" / "d4rl_mujoco.hdf5", FIXTURES / "hdf5" / "robomimic_d4rl.hdf5"
    run_cli("convert", d4rl, "-o", tmp_path / "d4rl")
    run_cli("convert", robomimic, "-o", tmp_path / "robomimic")
    run_cli("merge", tmp_path / "d4rl", tmp_path / "robomimic")
    # D4RL's observation is a (4,) array, robomimic's a dict ({"flat": (4,)}); actions agree
    expect = check_every_command(tmp_path / "d4rl", tmp_path, left_out=("observation",))
    with h5py.File(d4rl) as f:
        d4rl_total = float(f["rewards"][()].astype(np.float64).sum())
        d4rl_actions = len(f["actions"])
    with h5py.File(robomimic) as f:
        demos = [f["data"][d] for d in f["data"]]
        robo_total = sum(float(d["rewards"][()].astype(np.float64).sum()) for d in demos)
        robo_actions = sum(len(d["actions"]) for d in demos)
    assert sorted((e["actions"], round(e["reward"], 6)) for e in expect.values()) == sorted(
        [(d4rl_actions, round(d4rl_total, 6)), (robo_actions, round(robo_total, 6))])
    con = rlarrow.connect(tmp_path / "d4rl", warn=False)
    assert "action" in con.sql("select * from transitions limit 0").columns  # the agreeing column stays
    assert con.sql("select count(action) from steps").fetchall() == [(d4rl_actions + robo_actions,)]
    con.close()


@pytest.mark.parametrize(("types", "common"), [
    ([pa.int32(), pa.int64()], pa.int64()),
    ([pa.uint8(), pa.int8()], pa.int16()),
    ([pa.uint32(), pa.uint8()], pa.uint32()),
    ([pa.uint64(), pa.int64()], None),  # no signed type holds every uint64
    ([pa.float32(), pa.float64()], pa.float64()),
    ([pa.int64(), pa.float64()], None),  # never an integer into a float, nor back
    ([pa.int32(), pa.float32()], None),
    ([pa.list_(pa.float32(), 4), pa.list_(pa.float64(), 4)], pa.list_(pa.float64(), 4)),
    ([pa.list_(pa.float32(), 4), pa.list_(pa.float32(), 3)], None),  # another shape
    ([pa.list_(pa.list_(pa.int8(), 2), 3), pa.list_(pa.list_(pa.int32(), 2), 3)],
     pa.list_(pa.list_(pa.int32(), 2), 3)),
    ([pa.bool_(), pa.int8()], None),
])
def test_widening_is_exact_or_nothing(types, common):
    assert _widest(types) == common


def test_exact_widening_keeps_every_value_and_each_layout_its_type(tmp_path):
    path = tmp_path / "s"
    store = rlarrow.Store.create(path)
    for run, obs, action in [
            ("a", np.full((3, 2), 0.5, np.float32), pa.array([2**31 - 1, -2**31, None], pa.int32())),
            ("b", np.full((3, 2), 0.1, np.float64), pa.array([2**62 + 1, 1, None], pa.int64()))]:
        store.append("steps", {"run_id": run, "episode_id": 0, "step": np.arange(3), "env_index": 0,
                               "observation": obs, "action": action, "reward": [1.0, 2.0, None],
                               "discount": [1.0, 1.0, None], "is_first": [True, False, False],
                               "is_last": [False, False, True], "is_terminal": [False, False, True]})
    with pytest.warns(RLArrowWarning, match=r"widen observation to float64 \(2,\), action to int64"):
        con = rlarrow.connect(path)
    assert con.sql("select run_id, action, observation from steps where action is not null "
                   "order by run_id, step").fetchall() == [
        ("a", 2**31 - 1, [0.5, 0.5]), ("a", -2**31, [0.5, 0.5]),
        ("b", 2**62 + 1, [0.1, 0.1]), ("b", 1, [0.1, 0.1])]
    assert con.sql("select typeof(action), typeof(next_observation) from transitions limit 1").fetchall() == [
        ("BIGINT", "DOUBLE[]")]
    assert con.sql("select typeof(action), typeof(observation) from steps_1 limit 1").fetchall() == [
        ("INTEGER", "FLOAT[]")]
    assert con.sql('select run_id, steps, "return" from episode_returns(0.5) order by 1').fetchall() == [
        ("a", 2, 3.0), ("b", 2, 3.0)]
    with pytest.raises(rlarrow.core.errors.ArgumentError, match="only tables with tensor columns"):
        rlarrow.connect(path, layout={"runs": 1})
