"""StreamingDataset's parts, each alone and composed: source, sampler, transforms (rlarrow.train)."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pytest
from conftest import episode_columns

import rlarrow
from rlarrow.core.errors import ArgumentError, ArgumentTypeError
from rlarrow.train.sampling import SequentialSampler, ShuffleSampler
from rlarrow.train.source import Source
from rlarrow.train.transforms import DeltaSteps, DeltaTimestamps, Normalize, SequenceWindow, ToDevice

torch = pytest.importorskip("torch", reason="rlarrow.train.torch needs the torch extra")
from rlarrow.train.torch import DataLoader, StreamingDataset  # noqa: E402

LENGTHS = [4 + (e * 5) % 11 for e in range(24)]  # uneven episodes


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("parts") / "s.rlarrow"
    st = rlarrow.Store.create(path)
    for part, run in enumerate(("a", "b")):  # two runs, small row groups: episodes straddle them
        with st.writer("steps", row_group_bytes=4000) as w:
            for e in range(part * 12, (part + 1) * 12):
                w.write(episode_columns(run, e, LENGTHS[e], image=False))
    return path


def flat_batch(batch, prefix=""):
    out = {}
    for k, v in batch.items():
        if isinstance(v, dict):
            out.update(flat_batch(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
    return out


def assert_same_batches(one, two) -> int:
    """The two streams give equal batches (keys, dtypes, shapes and values, NaN included); how many."""
    left, right = [flat_batch(b) for b in one], [flat_batch(b) for b in two]
    assert len(left) == len(right) and left
    for a, b in zip(left, right, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
            assert np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f"), k
    return len(left)


@pytest.mark.parametrize(("old", "new"), [
    ({"batch_size": 16, "buffer_rows": 64, "seed": 3},
     {"sampler": ShuffleSampler(seed=3, buffer_rows=64)}),
    ({"batch_size": 16, "shuffle": False, "drop_last": True},
     {"sampler": SequentialSampler(), "drop_last": True}),
    ({"batch_size": 8, "sequence_length": 4, "seed": 1, "buffer_rows": 40},
     {"sampler": ShuffleSampler(seed=1, buffer_rows=40), "transforms": [SequenceWindow(4)]}),
    ({"batch_size": 8, "delta_timestamps": {"observation.position": [-0.1, 0.0], "action": [0.0, 0.1, 0.2]},
      "fps": 10},
     {"transforms": [DeltaTimestamps({"observation.position": [-0.1, 0.0], "action": [0.0, 0.1, 0.2]}, 10)]}),
    ({"batch_size": 16, "normalize": "mean_std", "rank": 1, "world_size": 2},
     {"sampler": ShuffleSampler(rank=1, world_size=2), "transforms": [Normalize("mean_std")]}),
], ids=["shuffled", "sequential", "windows", "delta_timestamps", "normalised-rank"])
def test_composed_equals_old_keywords_batch_for_batch(store, old, new):
    ds_old = StreamingDataset(store, **old)
    ds_new = StreamingDataset(source=Source(store), batch_size=old["batch_size"], **new)
    for epoch in (0, 1):
        ds_old.set_epoch(epoch)
        ds_new.set_epoch(epoch)
        assert assert_same_batches(ds_old, ds_new) > 1
    assert ds_new.shuffle == ds_old.shuffle and ds_new.seed == ds_old.seed
    assert (ds_new.stats is None) == (ds_old.stats is None)


def test_transitions_composed_equal_old_keywords(store):
    cols = ["observation", "action", "reward"]
    old = StreamingDataset(store, "transitions", columns=cols, batch_size=32, seed=5)
    new = StreamingDataset(source=Source(store, "transitions", columns=cols), sampler=ShuffleSampler(seed=5),
                           batch_size=32)
    assert assert_same_batches(old, new) > 1
    assert old.version == new.version == rlarrow.Store.open(store).version
    positional = StreamingDataset(Source(store, "transitions", columns=cols), batch_size=32, seed=5)
    assert assert_same_batches(old, positional) > 1


def test_source_alone_selects_runs_with_sql_or_expression(store):
    t = rlarrow.Store.open(store).read("steps", columns=["run_id", "reward"])
    want = sorted(x for r, x in zip(t["run_id"].to_pylist(), t["reward"].to_pylist(), strict=True)
                  if r == "b" and x is not None and x > 0)
    for flt in ("reward > 0", pc.field("reward") > 0):
        planned = Source(store, columns=["run_id", "reward"], runs=["b"], filter=flt).plan()
        got = [planned.read(u, {}) for u in planned.units]
        got = [g for g in got if g is not None]
        assert {r for g in got for r in g["run_id"].tolist()} == {"b"}
        assert sorted(x for g in got for x in g["reward"].tolist()) == want
    with pytest.raises(ArgumentTypeError, match="runs"):
        Source(store, runs=[1])


def test_source_plans_windows_alone(store):
    planned = Source(store, columns=["episode_id", "step"]).plan(**SequenceWindow(3).plan_args())
    windows = [w for w in (planned.read(u, {}) for u in planned.units) if w is not None]
    steps = np.concatenate([w["step"] for w in windows])
    episodes = np.concatenate([w["episode_id"] for w in windows])
    assert steps.shape[1] == 3 and (np.diff(steps, axis=1) == 1).all()
    assert (episodes == episodes[:, :1]).all()  # a window never crosses an episode
    assert len(steps) == sum(n + 1 - 2 for n in LENGTHS)  # every window of 3 of each episode's n + 1 rows


def test_sampler_alone_shards_and_orders(store):
    planned = Source(store, columns=["episode_id", "step"]).plan()
    sequential = [tuple(x) for b in SequentialSampler().batches(planned, 10)
                  for x in zip(b["episode_id"].tolist(), b["step"].tolist(), strict=True)]
    t = rlarrow.Store.open(store).read("steps", columns=["episode_id", "step"])
    assert sequential == list(zip(t["episode_id"].to_pylist(), t["step"].to_pylist(), strict=True))
    seen = []
    for rank in range(3):
        sampler = ShuffleSampler(seed=2, buffer_rows=50, rank=rank, world_size=3)
        seen += [tuple(x) for b in sampler.batches(planned, 7)
                 for x in zip(b["episode_id"].tolist(), b["step"].tolist(), strict=True)]
    assert sorted(seen) == sorted(sequential) and seen != sequential

    def rank0(seed):
        sampler = ShuffleSampler(seed=seed, rank=0, world_size=3)
        return [b["step"].tolist() for b in sampler.batches(planned, 7)]

    assert rank0(2) == rank0(2) != rank0(3)  # seeded: the same seed, the same batches


def test_sampler_state_resumes_a_dataset(store):
    sampler = ShuffleSampler(seed=4, buffer_rows=32)
    ds = StreamingDataset(source=Source(store, columns=["step"]), sampler=sampler, batch_size=8)
    ds.set_epoch(2)
    whole = [b["step"].tolist() for b in ds]
    it = iter(ds)
    first = [next(it)["step"].tolist() for _ in range(3)]
    state = sampler.state_dict()
    assert {k: state[k] for k in ("epoch", "delivered", "seed", "readers", "resumed")} == {
        "epoch": 2, "delivered": {0: 3}, "seed": 4, "readers": 1, "resumed": False}
    # which samples: 3 batches of 8, from the row groups done whole and the rest in part
    assert sum(len(ds.source.read(ds.units[u], {})["step"]) for u in state["done"]) + sum(
        len(ordinals) for _, ordinals in state["partial"].values()) == 24
    fresh = ShuffleSampler(seed=4, buffer_rows=32)
    fresh.load_state_dict(state)
    resumed = StreamingDataset(source=Source(store, columns=["step"]), sampler=fresh, batch_size=8)
    rest = [b["step"].tolist() for b in resumed]
    assert first + rest == whole
    with pytest.raises(ArgumentError, match="seed 4"):
        ShuffleSampler(seed=5).load_state_dict(state)


def test_transforms_alone():
    from rlarrow.core.stats import ColumnStats
    from rlarrow.train.normalize import normalizer

    assert DeltaTimestamps({"action": [0.0, 0.5]}, fps=4).plan_args() == {"delta_steps": {"action": [0, 2]}}
    with pytest.raises(ArgumentError, match="whole number of steps"):
        DeltaTimestamps({"action": [0.1]}, fps=4)
    with pytest.raises(ArgumentTypeError, match="mapping"):
        DeltaSteps({"action": "012"})
    values = np.array([[1.0, 2.0], [3.0, 8.0], [5.0, 5.0]])
    stats = {"observation": ColumnStats.from_array(values)}
    batch = {"observation": values.copy(), "observation_is_pad": np.array([False, True, False]),
             "step": np.arange(3)}
    out = Normalize("mean_std", stats=stats)(batch)
    want = normalizer(stats, "mean_std")(batch)["observation"]
    assert np.array_equal(out["observation"][[0, 2]], want[[0, 2]])
    assert (out["observation"][1] == 0).all()  # padding is never data
    assert out["step"].tolist() == [0, 1, 2]
    moved = ToDevice("cpu")({"x": {"y": torch.ones(2)}, "text": ["a"]})
    assert moved["x"]["y"].device.type == "cpu" and moved["text"] == ["a"]


def test_a_function_transform_runs_in_process_and_in_workers(store):
    def doubled(batch):
        return {**batch, "reward": batch["reward"] * 2}

    plain = StreamingDataset(store, columns=["reward"], batch_size=16, seed=0)
    want = [b["reward"] * 2 for b in plain]
    ds = StreamingDataset(source=Source(store, columns=["reward"]), transforms=[doubled], batch_size=16)
    assert all(torch.equal(a, b["reward"]) for a, b in zip(want, ds, strict=True))
    got = sorted(x for b in DataLoader(ds, num_workers=1) for x in b["reward"].tolist())
    assert got == sorted(x for b in want for x in b.tolist())


def test_parts_and_their_keywords_are_not_given_twice(store):
    with pytest.raises(ArgumentError, match="seed"):
        StreamingDataset(store, sampler=ShuffleSampler(), seed=1)
    with pytest.raises(ArgumentError, match="columns"):
        StreamingDataset(source=Source(store), columns=["step"])
    with pytest.raises(ArgumentError, match="give one"):
        StreamingDataset(source=Source(store), transforms=[SequenceWindow(2)], sequence_length=3)
    with pytest.raises(ArgumentTypeError, match="sampler"):
        StreamingDataset(store, sampler="shuffle")
    with pytest.raises(ArgumentTypeError, match="not a transform"):
        StreamingDataset(store, transforms=[42])
    with pytest.raises(ArgumentError, match="give a store"):
        StreamingDataset()
