"""rlarrow.train.torch: streaming (shuffle, windows, sharding, resume) and map-style datasets."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import episode_columns

import rlarrow

torch = pytest.importorskip("torch", reason="rlarrow.train.torch needs the torch extra")
from rlarrow.train.torch import DataLoader, StreamingDataset, TableDataset  # noqa: E402

LENGTHS = [5 + (e * 7) % 13 for e in range(40)]  # uneven episodes


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("torch") / "s.rlarrow"
    st = rlarrow.Store.create(path)
    # small row groups and several files: episodes straddle row groups, files divide unevenly
    for part in range(3):
        with st.writer("steps", row_group_bytes=6000) as w:
            for e in range(part * 14, min(40, (part + 1) * 14)):
                w.write(episode_columns("r", e, LENGTHS[e]))
    return path


def ids(batches) -> list[tuple[int, int]]:
    out = []
    for b in batches:
        out += list(zip(b["episode_id"].tolist(), b["step"].tolist(), strict=True))
    return out


def all_ids(store) -> list[tuple[int, int]]:
    t = rlarrow.Store.open(store).read("steps", columns=["episode_id", "step"])
    return list(zip(t["episode_id"].to_pylist(), t["step"].to_pylist(), strict=True))


def test_every_row_once_per_epoch_shuffled_across_row_groups(store):
    ds = StreamingDataset(store, columns=["episode_id", "step", "observation"], batch_size=32,
                          buffer_rows=256)
    assert len(ds.units) > 10
    first = ids(ds)
    assert sorted(first) == sorted(all_ids(store))
    assert len({e for e, _ in first[:32]}) > 5  # one batch mixes many episodes
    again = ids(ds)
    assert again == first  # same seed, same epoch: same order
    ds.set_epoch(1)
    assert ids(ds) != first and sorted(ids(ds)) == sorted(first)


def test_workers_and_ranks_see_each_row_exactly_once(store):
    seen: list[tuple[int, int]] = []
    for rank in range(3):  # 3 ranks x 2 workers: 6 readers for an uneven number of row groups
        ds = StreamingDataset(store, columns=["episode_id", "step"], batch_size=16, rank=rank, world_size=3)
        seen += ids(DataLoader(ds, num_workers=2))
    assert Counter(seen) == Counter(all_ids(store))


def test_torch_distributed_ranks_share_the_data(store, tmp_path):
    """Two real gloo ranks, each with two DataLoader workers."""
    script = textwrap.dedent(f"""
        import sys, torch, torch.distributed as dist
        from rlarrow.train.torch import DataLoader, StreamingDataset
        rank = int(sys.argv[1])
        dist.init_process_group("gloo", init_method="file://{tmp_path}/rendezvous", rank=rank, world_size=2)
        ds = StreamingDataset({str(store)!r}, columns=["episode_id", "step"], batch_size=16)
        with open(f"{tmp_path}/seen-{{rank}}.txt", "w") as f:
            for b in DataLoader(ds, num_workers=2):
                for e, s in zip(b["episode_id"].tolist(), b["step"].tolist()):
                    f.write(f"{{e}} {{s}}\\n")
        dist.destroy_process_group()
    """)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(r)], env=env) for r in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    seen = []
    for r in range(2):
        lines = (tmp_path / f"seen-{r}.txt").read_text().split("\n")
        seen += [tuple(map(int, line.split())) for line in lines if line]
    assert Counter(seen) == Counter(all_ids(store))


def test_sequence_windows_stay_inside_episodes(store):
    L = 4
    ds = StreamingDataset(store, columns=["episode_id", "step", "reward"], sequence_length=L, batch_size=8)
    n = 0
    for b in ds:
        ep, step = b["episode_id"].numpy(), b["step"].numpy()
        assert ep.shape[1] == L and (ep == ep[:, :1]).all()
        assert (np.diff(step, axis=1) == 1).all()
        n += len(ep)
    # one window per start that leaves L rows in its episode (episodes cross row groups)
    assert n == sum(length + 1 - (L - 1) for length in LENGTHS)


@pytest.fixture(scope="module")
def split_store(tmp_path_factory):
    """Episodes cut across commits as a vector recorder's flushes cut them.

    Each commit holds the next rows of two envs' episodes (env 0's rows, then env 1's), and
    another run's commit lands between two of ours: an episode's rows go on in a later
    file, in the middle of a row group, after other episodes' rows.
    """
    path = tmp_path_factory.mktemp("split") / "s.rlarrow"
    st = rlarrow.Store.create(path)
    tables = {(run, e): rlarrow.core.schema.build("steps",
                                                  episode_columns(run, e, LENGTHS[e], env_index=e % 2))
              for run in ("r", "q") for e in range(6)}
    chunk = 3
    for start in range(0, max(LENGTHS[:6]) + 1, chunk):
        for run in ("r", "q"):
            parts = [t.slice(start, chunk) for (r, _), t in tables.items() if r == run]
            parts = [p for p in parts if p.num_rows]
            if parts:
                st.append("steps", pa.concat_tables(parts))
    return path


@pytest.mark.parametrize("L", [2, 4, 9])
def test_sequence_windows_follow_an_episode_across_commits(split_store, L):
    assert len(rlarrow.Store.open(split_store).files("steps")) >= 10
    ds = StreamingDataset(split_store, columns=["run_id", "episode_id", "step", "reward"],
                          sequence_length=L, batch_size=8, shuffle=False)
    got = Counter()
    for b in ds:
        ep, step = b["episode_id"].numpy(), b["step"].numpy()
        assert (ep == ep[:, :1]).all() and (np.diff(step, axis=1) == 1).all()
        got.update(zip(ep[:, 0].tolist(), step[:, 0].tolist(), strict=True))
    # every start with L steps left in its episode, once per run, wherever its rows were written
    want = Counter({(e, s): 2 for e in range(6) for s in range(LENGTHS[e] + 1 - (L - 1))})
    assert got == want


def test_transitions_across_commits_are_all_there(split_store):
    ds = StreamingDataset(split_store, "transitions", columns=["observation", "reward"], batch_size=16)
    n = sum(len(b["done"]) for b in ds)
    assert n == 2 * sum(LENGTHS[:6])  # one transition per action, none lost at a commit's edge


def test_transitions_pair_observations_with_the_next(store):
    ds = StreamingDataset(store, "transitions", columns=["observation", "action", "reward"], batch_size=64)
    table = rlarrow.Store.open(store).read("steps")
    by_key = {}
    pos = rlarrow.core.tensors.to_numpy(table["observation"])["position"]
    for i, (e, s) in enumerate(zip(table["episode_id"].to_pylist(), table["step"].to_pylist(), strict=True)):
        by_key[pos[i].tobytes()] = (e, s)
    total = 0
    for b in ds:
        # (next_observation_is_pad: a null next observation is kept, masked, not left out)
        assert set(b) == {"observation", "next_observation", "next_observation_is_pad", "action", "reward",
                          "reward_is_pad", "done", "truncated"}
        assert not b["reward_is_pad"].any()  # every transition has its reward
        assert not b["next_observation_is_pad"].any()  # and its next observation
        obs, nxt_obs = b["observation"]["position"].numpy(), b["next_observation"]["position"].numpy()
        for o, nxt, done in zip(obs, nxt_obs, b["done"].tolist(), strict=True):
            e, s = by_key[o.tobytes()]
            assert by_key[nxt.tobytes()] == (e, s + 1)
            assert done == (s + 1 == LENGTHS[e])
        total += len(b["done"])
    assert total == sum(LENGTHS)


def test_filters_as_expression_or_sql(store):
    want = sorted(k for k in all_ids(store) if k[0] % 4 == 0)
    every_4th = pc.equal(pc.bit_wise_and(pc.field("episode_id"), 3), 0)
    expr = StreamingDataset(store, columns=["episode_id", "step"], filter=every_4th)
    sql = StreamingDataset(store, columns=["episode_id", "step"], filter="episode_id % 4 = 0")
    assert sorted(ids(expr)) == want == sorted(ids(sql))


def test_resume_mid_epoch_single_process_and_with_workers(store):
    kw = {"columns": ["episode_id", "step"], "batch_size": 16, "buffer_rows": 128, "seed": 3}
    full = ids(StreamingDataset(store, **kw))
    ds = StreamingDataset(store, **kw)
    it = iter(ds)
    head = ids([next(it) for _ in range(5)])
    state = ds.state_dict()
    resumed = StreamingDataset(store, **kw)
    resumed.load_state_dict(state)
    assert head + ids(resumed) == full

    ds = StreamingDataset(store, **kw)
    loader = DataLoader(ds, num_workers=2)
    it = iter(loader)
    head = ids([next(it) for _ in range(7)])
    state = ds.state_dict()
    del it
    again = StreamingDataset(store, **kw)
    again.load_state_dict(state)
    rest = ids(DataLoader(again, num_workers=2))
    assert Counter(head + rest) == Counter(full)


def test_persistent_workers_follow_set_epoch_and_a_resume_point(store):
    """torch sends a persistent worker nothing of the dataset again: the epoch must reach it."""
    kw = {"columns": ["episode_id", "step"], "batch_size": 16, "buffer_rows": 128, "seed": 5}
    fresh = [ids(DataLoader(StreamingDataset(store, **kw), num_workers=2, persistent_workers=False))]
    ds = StreamingDataset(store, **kw)
    ds.set_epoch(1)
    fresh.append(ids(DataLoader(ds, num_workers=2, persistent_workers=False)))
    assert fresh[0] != fresh[1]
    ds = StreamingDataset(store, **kw)
    loader = DataLoader(ds, num_workers=2)  # (persistent by default)
    assert loader.persistent_workers
    for epoch in (0, 1, 0):
        ds.set_epoch(epoch)
        assert ids(loader) == fresh[epoch]  # each epoch's own order, as fresh workers give it
    workers = loader._iterator
    ds.set_epoch(0)
    it = iter(loader)
    head = ids([next(it) for _ in range(7)])
    state = ds.state_dict()
    del it
    ds.load_state_dict(state)
    assert Counter(head + ids(loader)) == Counter(fresh[0])  # resumed: new workers skip what was seen
    assert loader._iterator is not workers


def test_persistent_workers_after_an_epoch_stopped_early_a_resume_twice_and_a_copy(store):
    import copy

    kw = {"columns": ["episode_id", "step"], "batch_size": 16, "buffer_rows": 128, "seed": 5}
    want = sorted(all_ids(store))
    ds = StreamingDataset(store, **kw)
    loader = DataLoader(ds, num_workers=2)
    it = iter(loader)
    next(it)  # an epoch stopped after a batch: torch discards what the workers sent ahead
    ds.set_epoch(1)
    assert sorted(ids(loader)) == want
    for epoch in range(2, 5):  # and again, a few times
        ds.set_epoch(epoch)
        next(iter(loader))
    ds.set_epoch(3)
    assert sorted(ids(loader)) == want
    ds.set_epoch(4)
    it = iter(loader)
    head = ids([next(it) for _ in range(5)])
    state = ds.state_dict()
    del it
    for _ in range(2):  # the same resume point, loaded twice
        ds.load_state_dict(state)
        assert sorted(head + ids(loader)) == want
    twin = copy.deepcopy(ds)  # (its epoch cell is its own, no longer shared)
    twin_loader = DataLoader(twin, num_workers=2)
    orders = []
    for epoch in (0, 1):
        twin.set_epoch(epoch)
        orders.append(ids(twin_loader))
    assert orders[0] != orders[1] and sorted(orders[0]) == want


def test_drop_last_and_batch_sizes(store):
    ds = StreamingDataset(store, columns=["step"], batch_size=50, buffer_rows=200)
    sizes = [len(b["step"]) for b in ds]
    assert all(s == 50 for s in sizes[:-1]) and sum(sizes) == len(all_ids(store))
    ds = StreamingDataset(store, columns=["step"], batch_size=50, drop_last=True)
    dropped = [len(b["step"]) for b in ds]
    assert set(dropped) == {50}


def test_table_dataset_random_access(store):
    ds = TableDataset(store, columns=["episode_id", "step", "observation"])
    keys = all_ids(store)
    assert len(ds) == len(keys)
    for i in (0, 17, len(ds) - 1, -1):
        row = ds[i]
        assert (int(row["episode_id"]), int(row["step"])) == keys[i]
    loader = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True,
                                         generator=torch.Generator().manual_seed(0))
    assert Counter(ids(loader)) == Counter(keys)
    batches = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(ds), 64, drop_last=False)
    fast = torch.utils.data.DataLoader(ds, sampler=batches, batch_size=None)
    assert Counter(ids(fast)) == Counter(keys)
    assert ds[[3, 1]]["observation"]["grid"].shape == (2, 4, 5)
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_device_and_pin_memory_on_a_machine_without_cuda(store):
    """device='cpu' with pin_memory: pinning is skipped without CUDA, values unchanged."""
    kw = dict(columns=["observation", "reward"], batch_size=32)
    ds = StreamingDataset(store, device="cpu", pin_memory=True, **kw)
    moved = next(iter(DataLoader(ds, num_workers=1)))
    plain = next(iter(StreamingDataset(store, **kw)))
    assert moved["observation"]["grid"].device.type == "cpu"
    assert torch.equal(moved["observation"]["grid"], plain["observation"]["grid"])
    # the loader's own pin_memory: pinned by the loader, not torch's pin thread (which
    # copied the workers' shared blocks whole, and warns without CUDA)
    loader = DataLoader(StreamingDataset(store, **kw), num_workers=1, pin_memory=True)
    assert loader._pin and not loader.pin_memory
    assert torch.equal(next(iter(loader))["observation"]["grid"], plain["observation"]["grid"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the GPU machine)")
def test_batches_land_on_the_gpu_pinned(store):
    ds = StreamingDataset(store, columns=["observation", "reward"], batch_size=32, device="cuda",
                          pin_memory=True)
    b = next(iter(DataLoader(ds, num_workers=1)))
    assert b["reward"].is_cuda and b["observation"]["grid"].device.type == "cuda"
    cpu = next(iter(StreamingDataset(store, columns=["observation", "reward"], batch_size=32)))
    assert torch.equal(b["observation"]["grid"].cpu(), cpu["observation"]["grid"])  # same rows, same bits
    assert torch.equal(b["reward"].cpu().isnan(), cpu["reward"].isnan())
    pinned = next(iter(DataLoader(StreamingDataset(store, columns=["observation", "reward"], batch_size=32),
                                  num_workers=1, pin_memory=True)))
    assert pinned["reward"].is_pinned()
    assert torch.equal(pinned["observation"]["grid"], cpu["observation"]["grid"])


# ------------------------------------------------------------------ windows kept as rows


@pytest.fixture(scope="module")
def interleaved_store(tmp_path_factory):
    """Three envs' rows interleaved step by step (as a vector env steps them), cut into commits
    of 7 rows: every episode's rows are out of storage order and cross several commits."""
    path = tmp_path_factory.mktemp("interleaved") / "s.rlarrow"
    st = rlarrow.Store.create(path)
    tables = [rlarrow.core.schema.build("steps", episode_columns("v", e, LENGTHS[e], env_index=e,
                                                                 image=False)) for e in range(3)]
    order = sorted((s, e) for e in range(3) for s in range(tables[e].num_rows))
    rows = pa.concat_tables([tables[e].slice(s, 1) for s, e in order])
    for lo in range(0, rows.num_rows, 7):
        st.append("steps", rows.slice(lo, 7))
    return path, {e: tables[e] for e in range(3)}


def window_keys(batches, L):
    got = Counter()
    for b in batches:
        ep, step, reward = b["episode_id"].numpy(), b["step"].numpy(), b["reward"].numpy()
        assert ep.shape[1] == L and (ep == ep[:, :1]).all() and (np.diff(step, axis=1) == 1).all()
        pad = b["reward_is_pad"].numpy()  # a null reward: the fill (0), masked; never NaN
        assert pad.shape == reward.shape and not np.isnan(reward).any() and (reward[pad] == 0).all()
        reward = np.where(pad, np.nan, reward)
        for e, s, r in zip(ep[:, 0].tolist(), step[:, 0].tolist(), reward.tolist(), strict=True):
            got[e, s, _values(r)] += 1
    return got


def _values(r):
    return tuple(None if np.isnan(x) else round(float(x), 12) for x in r)


@pytest.mark.parametrize("L", [2, 5, 12])
def test_windows_over_interleaved_envs_are_each_episodes_own_steps(interleaved_store, L):
    path, tables = interleaved_store
    want = Counter()
    for e, t in tables.items():
        reward = np.array([np.nan if r is None else r for r in t["reward"].to_pylist()])
        for s in range(t.num_rows - L + 1):
            want[e, s, _values(reward[s:s + L])] += 1
    for shuffle in (False, True):
        ds = StreamingDataset(path, columns=["episode_id", "step", "reward"], sequence_length=L,
                              batch_size=4, shuffle=shuffle, buffer_rows=16)
        assert window_keys(ds, L) == want


def test_a_read_keeps_rows_not_windows(interleaved_store):
    """However long the windows, a read holds its row group's rows once, plus at most L - 1
    rows to finish each episode that goes on elsewhere."""
    from rlarrow.train.samples import SampleSource

    path, _ = interleaved_store
    for L in (4, 64):
        source = SampleSource.from_store(rlarrow.Store.open(path, readonly=True), "steps",
                                         columns=["observation"], sequence_length=L)
        files: dict = {}
        for unit in source.units:
            got = source.read_windows(unit, files)
            if got is not None:
                assert got.rows <= unit.rows + 3 * (L - 1)  # three envs: three open episodes at most
                assert got.gather()["observation.position"].shape == (len(got), L, 3)


@pytest.mark.parametrize("keep", ["all", "none", "some"])
def test_workers_batches_are_never_overwritten(store, monkeypatch, keep):
    """Workers gather into shared blocks they reuse once the main process has let go of every
    batch made from one: batches kept (or dropped) must hold what the same stream gives
    in one process. Tiny parcels (a few batches each, split from one array a column) make
    the blocks go round many times; "some" keeps one batch in five of them, uncopied, to
    the end: its parcel's block must stay as it was while the others are reused."""
    import rlarrow.train.torch as rt

    monkeypatch.setattr(rt, "_PARCEL_BYTES", 2048)  # (workers fork: they see it)
    cols = ["episode_id", "step", "reward"]
    want = window_keys(StreamingDataset(store, columns=cols, sequence_length=3, batch_size=8), 3)
    ds = StreamingDataset(store, columns=cols, sequence_length=3, batch_size=8)
    loader = DataLoader(ds, num_workers=2, persistent_workers=True)
    for epoch in range(2):
        ds.set_epoch(epoch)
        if keep == "all":  # held until the end: blocks are never released, fresh ones are used
            got = window_keys(list(loader), 3)
        elif keep == "none":  # each batch read, then dropped
            got = window_keys(({k: v.clone() for k, v in b.items()} for b in loader), 3)
        else:
            held, copies = [], []
            for i, b in enumerate(loader):
                if i % 5 == 0:
                    held.append(b)
                    copies.append({k: v.clone() for k, v in b.items()})
                else:
                    copies.append({k: v.clone() for k, v in b.items()})
            assert len(held) > 3
            for b, c in zip(held, copies[::5], strict=True):
                assert all(np.array_equal(b[k].numpy(), c[k].numpy(), equal_nan=True) for k in c)
            got = window_keys(copies, 3)
        assert got == want


# ------------------------------------------------------------------ delta_steps (LeRobot's delta_timestamps)


def lerobot_reference(path, deltas):
    """What LeRobot's loader gives for every frame (LeRobotDataset._get_query_indices), on
    rlarrow's rows: the frames are the rows with an action (an episode's final-observation
    row is none); each offset's row clamped into the episode, and where that row is null in
    the column, into the episode's frames (LeRobot's [episode start, episode end - 1]);
    ``{key}_is_pad`` where the offset fell outside the episode or on a null row. Keyed by
    (run, episode, step) of the frame."""
    t = rlarrow.Store.open(path).read("steps")
    cols = {"run_id": t["run_id"].to_pylist(), "episode_id": t["episode_id"].to_pylist(),
            "step": t["step"].to_pylist(), "action": t["action"].to_pylist(),
            "reward": t["reward"].to_pylist(),
            "position": rlarrow.core.tensors.to_numpy(t["observation"])["position"]}
    episodes: dict = {}
    for i, key in enumerate(zip(cols["run_id"], cols["episode_id"], cols["step"], strict=True)):
        episodes.setdefault(key[:2], []).append((key[2], i))
    out = {}
    for ep, rows in episodes.items():
        rows = [i for _, i in sorted(rows)]
        n = len(rows)
        frames = [j for j, i in enumerate(rows) if cols["action"][i] is not None]
        for j in frames:
            item = {}
            for name, offsets in deltas.items():
                null = [name != "observation.position" and cols["reward"][i] is None for i in rows]
                at = [j + d for d in offsets]
                inside = [max(0, min(n - 1, a)) for a in at]
                idx = [rows[c if not null[c] else max(frames[0], min(frames[-1], a))]
                       for a, c in zip(at, inside, strict=True)]
                item[name] = cols["position"][idx] if name == "observation.position" else np.array(
                    [0.0 if cols["reward"][k] is None else cols["reward"][k] for k in idx])
                pad = [a != c or null[c] for a, c in zip(at, inside, strict=True)]
                item[name + "_is_pad"] = np.array(pad)
            out[(*ep, cols["step"][rows[j]])] = item
    return out


def check_against_lerobot(batches, want, deltas):
    seen = 0
    for b in batches:
        for r in range(len(b["step"])):
            key = (b["run_id"][r], int(b["episode_id"][r]), int(b["step"][r]))
            ref = want[key]
            assert np.array_equal(b["observation"]["position"][r].numpy(), ref["observation.position"])
            assert np.array_equal(b["reward"][r].numpy(), ref["reward"])  # (never NaN: no reward is)
            for name in deltas:  # the mask beside its column (a dict leaf's inside the dict)
                node = b
                *parents, leaf = (name + "_is_pad").split(".")
                for p in parents:
                    node = node[p]
                assert node[leaf][r].numpy().tolist() == ref[name + "_is_pad"].tolist()
            seen += 1
    assert seen == len(want)  # every frame is a sample, once; the final-observation rows are none


DELTAS = {"observation.position": [-4, -1, 0], "reward": list(range(7))}


@pytest.mark.parametrize("which", ["interleaved", "split"])
def test_delta_steps_match_lerobots_padding(which, interleaved_store, split_store):
    """Per-column offsets around every step, clamped to its episode with pad masks as LeRobot
    does, wherever the episode's rows were written (interleaved envs, other commits)."""
    path = interleaved_store[0] if which == "interleaved" else split_store
    want = lerobot_reference(path, DELTAS)
    for shuffle in (False, True):
        ds = StreamingDataset(path, columns=["run_id", "episode_id", "step", "observation", "reward"],
                              delta_steps=DELTAS, batch_size=5, shuffle=shuffle, buffer_rows=16)
        got = list(ds)
        assert got[0]["observation"]["position"].shape[1:] == (3, 3) and got[0]["reward"].shape[1:] == (7,)
        assert got[0]["episode_id"].shape == (5,)  # columns without offsets: the step itself
        check_against_lerobot(got, want, DELTAS)


def test_delta_timestamps_in_seconds_and_workers(split_store, monkeypatch):
    import rlarrow.train.torch as rt

    monkeypatch.setattr(rt, "_PARCEL_BYTES", 4096)
    want = lerobot_reference(split_store, DELTAS)
    seconds = {"observation.position": [-0.2, -0.05, 0.0], "reward": [k * 0.05 for k in range(7)]}
    ds = StreamingDataset(split_store, columns=["run_id", "episode_id", "step", "observation", "reward"],
                          delta_timestamps=seconds, fps=20, batch_size=5)
    check_against_lerobot(list(DataLoader(ds, num_workers=2)), want, DELTAS)


def test_delta_steps_refuse_what_they_cannot_mean(store):
    from rlarrow.core.errors import ArgumentError, ArgumentTypeError, NotFoundError

    with pytest.raises(ArgumentError, match="whole number of steps"):
        StreamingDataset(store, delta_timestamps={"action": [0.0, 0.033]}, fps=20)
    with pytest.raises(ArgumentError, match="fps"):
        StreamingDataset(store, delta_timestamps={"action": [0.0]})
    with pytest.raises(ArgumentError, match="give one"):
        StreamingDataset(store, delta_steps={"action": [0, 1]}, sequence_length=4)
    with pytest.raises(NotFoundError, match="no column 'actions'"):
        StreamingDataset(store, delta_steps={"actions": [0, 1]})
    with pytest.raises(ArgumentTypeError, match="whole step offsets"):
        StreamingDataset(store, delta_steps={"action": [0.5]})
    with pytest.raises(ArgumentError, match="table='steps'"):
        StreamingDataset(store, "transitions", delta_steps={"action": [0]})


def test_a_loader_without_workers_each_epoch(store):
    """num_workers=0 runs the dataset in the main process: no shared blocks, and a new
    DataLoader per epoch over the same dataset (README's loop) gives every row each time."""
    ds = StreamingDataset(store, columns=["episode_id", "step"], batch_size=16)
    for epoch in range(2):
        ds.set_epoch(epoch)
        assert sorted(ids(DataLoader(ds, num_workers=0))) == sorted(all_ids(store))
