"""rlarrow convert as a user runs it: experiment directories, re-imports, all or nothing."""

from __future__ import annotations

import json
import shutil

import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from test_transaction import committed

import rlarrow
from rlarrow.cli.commands import cli
from rlarrow.core.errors import CorruptFileError, InvalidInputError
from rlarrow.core.store import MANIFEST_NAME
from rlarrow.io.importing import content_hash, find_units, import_paths, is_experiment_dir
from tests.conftest import FIXTURES

TORCH_EVENTS = FIXTURES / "tfevents" / "torch"
SKRL = FIXTURES / "skrl" / "wrapped" / "memories"


def experiment(root, name: str, *, memories=("pt", "npz"), events: bool = True):
    """A skrl-style experiment directory: event files, memories/, checkpoints/."""
    exp = root / name
    (exp / "memories").mkdir(parents=True)
    (exp / "checkpoints").mkdir()
    (exp / "checkpoints" / "agent_100.pt").write_bytes(b"not data")
    if events:
        for f in TORCH_EVENTS.rglob("*tfevents*"):
            target = exp / f.relative_to(TORCH_EVENTS)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
    for ext in memories:
        src = next(SKRL.glob(f"*.{ext}"))
        shutil.copyfile(src, exp / "memories" / src.name)
    return exp


def convert(*args: str) -> str:
    result = CliRunner().invoke(cli, ["convert", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_an_experiment_directory_is_one_run(tmp_path):
    exp = experiment(tmp_path / "runs", "PPO_cartpole")
    assert is_experiment_dir(exp)
    store = tmp_path / "s.rlarrow"
    out = convert(str(exp), "-o", str(store))
    st = rlarrow.Store.open(store)
    runs = st.read("runs").to_pylist()
    main = [r for r in runs if r["name"] == "PPO_cartpole"]
    assert len(main) == 1 and main[0]["source"] == "experiment"
    rid = main[0]["run_id"]
    assert rid in out and "checkpoint" in out
    meta = json.loads(main[0]["metadata"])
    assert meta["not_imported"] == ["checkpoints/agent_100.pt"]
    # the root TensorBoard run's scalars and both snapshots are in the one run
    scalars = st.read("scalars", filter=pc.field("run_id") == rid)
    assert scalars.num_rows > 0
    snaps = st.read("memory", columns=["run_id", "snapshot_id"])
    assert set(snaps.column("run_id").to_pylist()) == {rid}
    assert sorted(set(snaps.column("snapshot_id").to_pylist())) == [0, 1]
    # add_scalars folders stay sub-runs of it
    assert {r["run_id"] for r in runs} - {rid} == {f"{rid}/rewards_max", f"{rid}/rewards_mean"}
    # every source recorded, with the snapshot it made
    sources = st.read("sources").to_pylist()
    assert {s["format"] for s in sources} == {"tfevents", "pt", "npz"}
    by_path = {s["path"]: s for s in sources}
    pt = next(p for p in by_path if p.endswith(".pt"))
    assert by_path[pt]["sha256"] == content_hash(pt)[0]
    assert {by_path[p]["snapshot_id"] for p in by_path if p.endswith((".pt", ".npz"))} == {0, 1}


def test_a_folder_of_experiments_makes_one_run_each(tmp_path):
    experiment(tmp_path / "runs" / "torch" / "CartPole", "A")
    experiment(tmp_path / "runs" / "torch" / "CartPole", "B", memories=("csv",), events=False)
    assert [u.path.name for u in find_units(tmp_path / "runs")] == ["A", "B"]
    store = tmp_path / "s.rlarrow"
    convert(str(tmp_path / "runs"), "-o", str(store), "--num-envs", "4")
    st = rlarrow.Store.open(store)
    names = {r["name"]: r["run_id"] for r in st.read("runs").to_pylist() if r["source"] == "experiment"}
    assert set(names) == {"A", "B"}
    mem = st.read("memory", columns=["run_id"]).column("run_id").to_pylist()
    assert set(mem) == set(names.values())


def test_the_same_source_twice_is_skipped_unless_again(tmp_path):
    exp = experiment(tmp_path / "runs", "E")
    store = tmp_path / "s.rlarrow"
    convert(str(exp), "-o", str(store))
    before = (store / MANIFEST_NAME).read_bytes()
    copy = shutil.copytree(exp, tmp_path / "elsewhere" / "E2")  # same content, other place
    out = convert(str(copy), "-o", str(store))
    assert "imported before into run" in out and "--again" in out
    assert json.loads((store / MANIFEST_NAME).read_bytes())["tables"] == json.loads(before)["tables"]
    # loose memory files: each one recognised
    out = convert(str(next(SKRL.glob("*.pt"))), "-o", str(store))
    assert "skipped" in out and rlarrow.Store.open(store).row_count("memory") == 2 * 64 * 4
    out = convert(str(copy), "-o", str(store), "--again")
    st = rlarrow.Store.open(store)
    assert sum(r["source"] == "experiment" for r in st.read("runs").to_pylist()) == 2
    assert st.row_count("memory") == 4 * 64 * 4


def test_a_changed_experiment_is_not_silently_half_imported(tmp_path):
    exp = experiment(tmp_path / "runs", "E", memories=("pt",))
    store = tmp_path / "s.rlarrow"
    convert(str(exp), "-o", str(store))
    shutil.copyfile(next(SKRL.glob("*.npz")), exp / "memories" / "later.npz")  # training went on
    result = CliRunner().invoke(cli, ["convert", str(exp), "-o", str(store)])
    assert result.exit_code != 0
    assert "were imported before" in result.output and "--again" in result.output
    assert "nothing was committed" in result.output


def test_a_failure_half_way_commits_nothing(tmp_path):
    good = experiment(tmp_path / "runs", "good")
    bad = experiment(tmp_path / "runs", "bad", memories=("pt",), events=False)
    pt = next((bad / "memories").glob("*.pt"))
    pt.write_bytes(pt.read_bytes()[: pt.stat().st_size // 2])  # truncated export
    store = tmp_path / "s.rlarrow"
    rlarrow.Store.create(store)
    before = committed(store)
    with pytest.raises(CorruptFileError, match=pt.name):
        import_paths([good, bad], store)
    assert committed(store) == before
    leftovers = [p for t in rlarrow.core.schema.TABLE_NAMES for p in (store / t).iterdir()]
    assert leftovers == []
    result = CliRunner().invoke(cli, ["convert", str(good), str(bad), "-o", str(store)])
    assert result.exit_code == 1 and "nothing was committed" in result.output
    assert committed(store) == before


def test_run_id_with_several_runs_is_refused(tmp_path):
    a = experiment(tmp_path / "runs", "A")
    b = experiment(tmp_path / "runs", "B", memories=("npz",), events=False)
    result = CliRunner().invoke(cli, ["convert", str(a), str(b), "-o", str(tmp_path / "s"), "--run-id", "x"])
    assert result.exit_code != 0 and "--run-id" in result.output


def test_names_flag_is_parsed_and_checked(tmp_path):
    result = CliRunner().invoke(cli, ["convert", str(SKRL), "-o", str(tmp_path / "s"), "--names", "states"])
    assert result.exit_code == 2 and "ROLE=TENSOR" in result.output


def train_skrl_experiment(runs, algo: str, timesteps: int = 600):
    """A real skrl 2 run as a user sets one up: runs/<algo>_cartpole with events, checkpoints, memories."""
    import gymnasium as gym
    import torch
    from skrl.agents.torch.dqn import DQN, DQN_CFG
    from skrl.agents.torch.ppo import PPO, PPO_CFG
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.memories.torch import RandomMemory
    from skrl.trainers.torch import SequentialTrainer
    from skrl.utils import set_seed

    from tests.skrl_train import Critic, Policy

    set_seed(1)
    torch.set_num_threads(1)
    name = f"{algo}_cartpole"
    env = wrap_env(gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync"), wrapper="gymnasium")
    experiment = {"directory": str(runs), "experiment_name": name, "write_interval": 50,
                  "checkpoint_interval": 300}
    size = 64 if algo == "ppo" else 200
    memory = RandomMemory(memory_size=size, num_envs=4, device="cpu", export=True,
                          export_directory=str(runs / name), export_format="pt")
    if algo == "ppo":
        agent = PPO(models={"policy": Policy(env.observation_space, env.action_space),
                            "value": Critic(env.observation_space, env.action_space)},
                    memory=memory, observation_space=env.observation_space, action_space=env.action_space,
                    device="cpu", cfg=PPO_CFG(rollouts=size, learning_epochs=1, mini_batches=2,
                                              experiment=experiment))
    else:
        agent = DQN(models={"q_network": Critic(env.observation_space, env.action_space, 2),
                            "target_q_network": Critic(env.observation_space, env.action_space, 2)},
                    memory=memory, observation_space=env.observation_space, action_space=env.action_space,
                    device="cpu", cfg=DQN_CFG(learning_starts=50, random_timesteps=50,
                                              experiment=experiment))
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": timesteps, "headless": True,
                                                  "disable_progressbar": True,
                                                  "close_environment_at_exit": False}).train()
    env.close()
    return runs / name


@pytest.mark.slow
def test_a_real_skrl_project_becomes_one_store(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs = tmp_path / "runs"
    exps = {algo: train_skrl_experiment(runs, algo) for algo in ("ppo", "dqn")}
    for exp in exps.values():
        assert list((exp / "memories").glob("*.pt")) and list((exp / "checkpoints").glob("*.pt"))
    store = tmp_path / "project.rlarrow"
    out = convert(str(runs), "-o", str(store), "--episodes")
    st = rlarrow.Store.open(store)
    runs_by_name = {r["name"]: r for r in st.read("runs").to_pylist() if r["source"] == "experiment"}
    assert set(runs_by_name) == {"ppo_cartpole", "dqn_cartpole"}
    for algo, exp in exps.items():
        rid = runs_by_name[f"{algo}_cartpole"]["run_id"]
        # the scalars are skrl's own, as TensorBoard reads them
        acc = EventAccumulator(str(exp))
        acc.Reload()
        mine = st.read("scalars", filter=pc.field("run_id") == rid)
        assert set(mine.column("tag").to_pylist()) == set(acc.Tags()["scalars"])
        tag = "Reward / Total reward (mean)"
        want = [(e.step, e.value) for e in acc.Scalars(tag)]
        steps, values, tags = (mine.column(c).to_pylist() for c in ("step", "value", "tag"))
        got = sorted((s, v) for s, v, t in zip(steps, values, tags, strict=True) if t == tag)
        assert got == sorted(want)
        # every memory export of the experiment is a snapshot of the run, unrolled into episodes
        layout = st.layout_of("memory", rid)
        snaps = st.read("memory", columns=["run_id", "snapshot_id"], filter=pc.field("run_id") == rid,
                        layout=layout)
        assert len(set(snaps.column("snapshot_id").to_pylist())) == len(list((exp / "memories").glob("*.pt")))
        eps = st.read("episodes", filter=pc.field("run_id") == rid)
        assert eps.num_rows > 0
        lengths = pc.subtract(eps.column("num_steps"), 1).to_pylist()  # RLDS: one step more than actions
        whole = [n for n, ps, pe in zip(lengths, eps.column("partial_start").to_pylist(),
                                        eps.column("partial_end").to_pylist(), strict=True) if not (ps or pe)]
        assert whole and all(8 <= n <= 500 for n in whole)  # CartPole episodes, no autoreset step inside
    # PPO's and DQN's memories have different tensors, and each run keeps its own
    ppo_rid, dqn_rid = (runs_by_name[n]["run_id"] for n in ("ppo_cartpole", "dqn_cartpole"))
    names_of = {rid: set(st.schema("memory", layout=st.layout_of("memory", rid)).names)
                for rid in (ppo_rid, dqn_rid)}
    assert st.layout_of("memory", ppo_rid) != st.layout_of("memory", dqn_rid)
    assert "log_prob" in names_of[ppo_rid] or "values" in names_of[ppo_rid]
    assert "next_observations" in names_of[dqn_rid]
    # a second convert of the same project is recognised and adds nothing
    rows = {t: st.row_count(t) for t in rlarrow.core.schema.TABLE_NAMES}
    again = convert(str(runs), "-o", str(store))
    assert again.count("imported before") == 2
    assert {t: rlarrow.Store.open(store).row_count(t) for t in rlarrow.core.schema.TABLE_NAMES} == rows
    assert out.count("experiment") >= 2


# --------------------------------------------------------------------------- each format's own options


def _memory_tables(store) -> dict[str, list]:
    st = rlarrow.Store.open(store, readonly=True)
    out = {t: st.read(t, columns=["run_id"]).num_rows for t in ("memory", "episodes", "steps")}
    st.close()
    return out


def test_per_format_options_do_what_the_old_keywords_did(tmp_path):
    from rlarrow.io.memory.memory_options import MemoryOptions

    pt = str(next(SKRL.glob("*.pt")))
    new = import_paths([pt], tmp_path / "new", progress=False,
                       options={"memory": MemoryOptions(episodes=True, layout="list")})
    old = import_paths([pt], tmp_path / "old", progress=False, episodes=True, layout="list")
    counts = _memory_tables(tmp_path / "new")
    assert counts == _memory_tables(tmp_path / "old") and counts["episodes"] > 0 and counts["steps"] > 0
    assert len(new.runs) == len(old.runs) == 1
    plain = import_paths([pt], tmp_path / "plain", progress=False)  # no options: each format's defaults
    assert plain.runs and _memory_tables(tmp_path / "plain")["episodes"] == 0


def test_options_of_another_format_or_unknown_keywords_are_refused(tmp_path):
    from rlarrow.core.errors import ArgumentError
    from rlarrow.io.lerobot.lerobot_options import LeRobotOptions
    from rlarrow.io.memory.memory_options import MemoryOptions

    pt = str(next(SKRL.glob("*.pt")))
    with pytest.raises(ArgumentError, match=r"options\['memory'\].*takes a MemoryOptions"):
        import_paths([pt], tmp_path / "a", options={"memory": LeRobotOptions()})
    with pytest.raises(ArgumentError, match=r"options\['toml'\]: no format"):
        import_paths([pt], tmp_path / "a", options={"toml": MemoryOptions()})
    with pytest.raises(ArgumentError, match="unknown keyword argument 'episode'"):
        import_paths([pt], tmp_path / "a", episode=True)
    with pytest.raises(ArgumentError, match="dtype='float16'"):
        MemoryOptions(dtype="float16")
    # a dataset's option with no such dataset among the inputs: said, in Python's spelling
    with pytest.raises(InvalidInputError, match="video='keep' applies to lerobot"):
        import_paths([pt], tmp_path / "a", options={"lerobot": LeRobotOptions(video="keep")})
    assert not (tmp_path / "a").exists()  # refused before any store was made


def test_import_options_still_work_and_give_each_format_its_own():
    from rlarrow.io.envlogger import EnvloggerOptions
    from rlarrow.io.hdf5 import HDF5Options
    from rlarrow.io.memory.memory_options import MemoryOptions
    from rlarrow.io.registry import ImportOptions, get

    bag = ImportOptions(run_id="r", skip_corrupt=True, hdf5_links=True, episodes=True, num_envs=4)
    assert bag.run(get("envlogger")).options == EnvloggerOptions(skip_corrupt=True)
    assert bag.run(get("hdf5")).options == HDF5Options(allow_links=True)
    call = bag.run(get("npz"))
    assert call.run_id == "r" and call.options == MemoryOptions(episodes=True, num_envs=4)
    assert {f.name: f.options_type().__name__ for f in rlarrow.io.registry.importers()} == {
        "pt": "MemoryOptions", "npz": "MemoryOptions", "csv": "MemoryOptions", "parquet": "MemoryOptions",
        "envlogger": "EnvloggerOptions", "minari": "MinariOptions", "rlds": "RldsOptions",
        "lerobot": "LeRobotOptions", "hdf5": "HDF5Options", "tfevents": "TfeventsOptions"}
