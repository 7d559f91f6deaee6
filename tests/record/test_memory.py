"""rlarrow.record.replay behaves as skrl's Memory (run side by side) and its parquet export keeps order."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest

import rlarrow
from rlarrow.io.memory.importer import read_memory

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_SKRL = importlib.util.find_spec("skrl") is not None
pytestmark = pytest.mark.skipif(not HAVE_TORCH,
                                reason="rlarrow.record.replay needs torch: pip install 'rlarrow[torch]'")
needs_skrl = pytest.mark.skipif(not HAVE_SKRL,
                                reason="needs skrl (test-only peer): pip install skrl torch==2.13.0")


def make(cls, memory_size=5, num_envs=3, **kw):
    import torch

    m = cls(memory_size=memory_size, num_envs=num_envs, device="cpu", **kw)
    m.create_tensor("states", size=4)
    m.create_tensor("actions", size=[2, 3], keep_dimensions=True)
    m.create_tensor("rewards", size=1, dtype=torch.float64)
    m.create_tensor("terminated", size=1, dtype=torch.bool)
    m.create_tensor("steps", size=1, dtype=torch.int64)
    return m


def feed(memory, calls):
    import torch

    g = torch.Generator().manual_seed(0)
    for envs in calls:
        shape = () if envs is None else (envs,)
        memory.add_samples(
            states=torch.randn(*shape, 4, generator=g),
            actions=torch.randn(*shape, 2, 3, generator=g),
            rewards=torch.randn(*shape, 1, generator=g, dtype=torch.float64),
            terminated=torch.rand(*shape, 1, generator=g) > 0.7,
            steps=torch.randint(0, 100, (*shape, 1), generator=g),
        )


CASES = {
    "all envs, wrapping": (5, 3, [3] * 7),
    "fewer envs than num_envs": (5, 3, [1, 2, 2, 1, 3, 1, 1, 1]),
    "one sample at a time": (4, 2, [None] * 11),
    "one env, many samples": (6, 1, [4, 1, 3]),
}


@needs_skrl
@pytest.mark.parametrize("case", list(CASES))
def test_same_buffers_and_pointers_as_skrl(case):
    import torch
    from skrl.memories.torch import RandomMemory as SkrlMemory

    size, envs, calls = CASES[case]
    ours, theirs = make(rlarrow.record.replay.RandomMemory, size, envs), make(SkrlMemory, size, envs)
    feed(ours, calls)
    if case == "one env, many samples":
        # skrl moves its memory index once per tensor here, so each tensor lands elsewhere;
        # compare with skrl given one tensor, where it is right
        for name in [n for n in theirs.tensors if n != "states"]:
            del theirs.tensors[name]
    feed(theirs, calls)
    for name in theirs.get_tensor_names():
        a, b = ours.get_tensor_by_name(name), theirs.get_tensor_by_name(name)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a.numpy(), b.numpy(), equal_nan=True), name
    assert (ours.memory_index, ours.env_index) == (theirs.memory_index, theirs.env_index)
    if case != "one env, many samples":  # skrl never sets `filled` when many samples wrap
        assert (len(ours), ours.filled) == (len(theirs), theirs.filled)
    if case == "one env, many samples":  # every tensor written at the same rows
        assert (ours.tensors["terminated"].view(-1) != ours.tensors["terminated"][:, 0, 0]).sum() == 0
        assert not torch.isnan(ours.tensors["rewards"][:2]).any()
    else:
        assert ours.get_tensor_names() == theirs.get_tensor_names()
    flat = ours.get_tensor_by_name("states", keepdim=False)
    assert flat.shape == (size * envs, 4) and flat.data_ptr() == ours.tensors["states"].data_ptr()


def test_sampling():
    import torch

    memory = make(rlarrow.record.replay.RandomMemory, 5, 3)
    with pytest.raises(ValueError, match="0 valid rows"):
        memory.sample(["states"], batch_size=2)
    feed(memory, [3, 3])  # 6 valid rows of 15
    [[states, actions, missing]] = memory.sample(["states", "actions", "nope"], batch_size=32)
    assert states.shape == (32, 4) and actions.shape == (32, 2, 3) and missing is None
    idx = memory.get_sampling_indexes()
    assert int(idx.max()) < 6 and not torch.isnan(states).any()
    assert torch.equal(states, memory.tensors_view["states"][idx])
    no_repl = rlarrow.record.replay.RandomMemory(memory_size=5, num_envs=3, device="cpu", replacement=False)
    no_repl.create_tensor("states", 4)
    feed(no_repl, [3, 3])
    no_repl.sample(["states"], batch_size=32)
    assert sorted(no_repl.get_sampling_indexes().tolist()) == list(range(6))
    feed(memory, [3] * 3)  # full
    batches = memory.sample(["states"], batch_size=4, mini_batches=2, sequence_length=3)
    assert [b[0].shape for b in batches] == [(6, 4), (6, 4)]
    seq = memory.get_sampling_indexes().view(4, 3)
    assert (seq[:, 1:] - seq[:, :-1] == 3).all()  # consecutive steps of one env
    [[everything]] = memory.sample_all(["states"])
    assert everything.data_ptr() == memory.tensors["states"].data_ptr()  # a view, not a copy
    [[by_env]] = memory.sample_all(["states"], sequence_length=2)
    assert torch.equal(by_env[:5], memory.tensors["states"][:, 0])


def test_create_tensor_rules():
    import torch

    memory = rlarrow.record.replay.Memory(4, 2, device="cpu")
    assert memory.create_tensor("states", 3) is True
    assert memory.create_tensor("states", 3) is False
    assert memory.create_tensor("none", None) is False
    with pytest.raises(ValueError, match="size"):
        memory.create_tensor("states", 4)
    with pytest.raises(ValueError, match="dtype"):
        memory.create_tensor("states", 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="column of the memory table"):
        memory.create_tensor("env_index", 1)
    with pytest.raises(ValueError, match="export_format=.* is not supported"):
        rlarrow.record.replay.Memory(4, export_format="hdf5")
    assert torch.isnan(memory.tensors["states"]).all()
    with pytest.raises(NotImplementedError, match="RandomMemory"):
        memory.sample(["states"], batch_size=1)


@pytest.mark.parametrize("fmt", ["pt", "npz", "csv", "parquet"])
def test_export_on_fill_writes_before_overwriting(tmp_path, fmt):
    memory = make(rlarrow.record.replay.RandomMemory, 4, 2, export=True, export_format=fmt,
                  export_directory=tmp_path)
    if fmt == "csv":  # csv holds no keep_dimensions tensor (see the next test)
        del memory.tensors["actions"], memory.tensors_view["actions"]
    feed(memory, [2] * 4)
    [path] = list((tmp_path / "memories").iterdir())
    assert path.suffix == f".{fmt}" and "_memory_0x" in path.name
    before_wrap = {n: t.clone() for n, t in memory.tensors.items()}
    feed(memory, [2])  # overwrites row 0 only after the export
    snap = read_memory(path, num_envs=2, memory_size=4, dtype="float64")  # csv: rewards are float64
    for name in ("states", "rewards", "terminated") + (() if fmt == "csv" else ("actions",)):
        assert np.array_equal(snap.tensors[name].reshape(before_wrap[name].shape), before_wrap[name].numpy())


def test_csv_export_of_keep_dimensions_is_refused(tmp_path):
    memory = make(rlarrow.record.replay.Memory, 2, 1)
    feed(memory, [1])
    with pytest.raises(rlarrow.UnsupportedInputError, match="keep_dimensions"):
        memory.save(tmp_path, "csv")


def test_parquet_keeps_pointers_and_load_restores_them(tmp_path):
    memory = make(rlarrow.record.replay.RandomMemory, 5, 3)
    feed(memory, [3] * 7)  # wrapped: write pointer at 2
    path = memory.save(tmp_path, "parquet")
    back = make(rlarrow.record.replay.RandomMemory, 5, 3)
    back.load(path)
    assert (back.filled, back.memory_index, back.env_index) == (True, 2, 0)
    for name in memory.get_tensor_names():
        assert np.array_equal(back.tensors[name].numpy(), memory.tensors[name].numpy(), equal_nan=True)
    legacy = memory.save(tmp_path, "npz")
    fresh = make(rlarrow.record.replay.RandomMemory, 5, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fresh.load(legacy)
    assert any(issubclass(w.category, rlarrow.AssumptionWarning) for w in caught)
    assert fresh.filled and len(fresh) == 15


@pytest.mark.skipif(not HAVE_TORCH or not __import__("torch").cuda.is_available(),
                    reason="needs a CUDA device")
def test_tensors_live_on_the_requested_device():
    import torch

    memory = rlarrow.record.replay.RandomMemory(memory_size=8, num_envs=4, device="cuda:0")
    memory.create_tensor("states", 3)
    memory.add_samples(states=torch.ones(4, 3))
    [[batch]] = memory.sample(["states"], batch_size=5)
    assert batch.device.type == "cuda" and memory.tensors["states"].device.type == "cuda"


def test_rows_written_at_the_pointer_by_a_partial_add_are_filled(tmp_path):
    """Fewer samples than num_envs at a time (as skrl allows) fill the pointer's row env by env."""
    import pyarrow.parquet as pq

    memory = make(rlarrow.record.replay.RandomMemory, 5, 3)
    feed(memory, [1, 2, 2])  # 5 samples: row 0 whole, row 1 envs 0 and 1
    assert (memory.memory_index, memory.env_index, len(memory)) == (1, 2, 5)
    table = pq.read_table(memory.save(tmp_path, "parquet"), columns=["memory_index", "env_index", "filled"])
    filled = {(r["memory_index"], r["env_index"]) for r in table.to_pylist() if r["filled"]}
    assert filled == {(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)}
