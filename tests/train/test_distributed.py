"""Every sample of an epoch exactly once across torch.distributed ranks x DataLoader workers, and resumes.

Real ranks: ``torchrun`` (gloo) processes, each with a ``rlarrow.train.torch.DataLoader`` of two
workers, over a small store made here; samples are identified by ``(episode_id, step)`` (a
window or transition by its first step). Resumes at another world size load the states every
rank saved (``all_gather_object``) and must deliver exactly the samples not yet seen.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import episode_columns

import rlarrow
from rlarrow.core.errors import ArgumentError

torch = pytest.importorskip("torch", reason="rlarrow.train.torch needs the torch extra")
from rlarrow.train.sampling import Ledger  # noqa: E402
from rlarrow.train.torch import DataLoader, StreamingDataset  # noqa: E402

LENGTHS = [9 + (e * 5) % 7 for e in range(24)]
KEYS = ["episode_id", "step"]
# the datasets checked: (table, extra keyword arguments); each sample's keys identify it
CASES = {
    "transitions-shuffled": ("transitions", {"shuffle": True}),
    "transitions-in-order": ("transitions", {"shuffle": False}),
    "windows-shuffled": ("steps", {"shuffle": True, "sequence_length": 4}),
    "windows-in-order": ("steps", {"shuffle": False, "sequence_length": 4}),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """24 commits of an episode each: 24 row groups, every one holding transitions and windows of 4."""
    path = tmp_path_factory.mktemp("dist") / "s.rlarrow"
    st = rlarrow.Store.create(path)
    for e, n in enumerate(LENGTHS):
        st.append("steps", episode_columns("r", e, n, image=False))
    return path


def dataset(store, case: str, **kw) -> StreamingDataset:
    table, extra = CASES[case]
    return StreamingDataset(store, table, columns=[*KEYS, "observation"], batch_size=8, buffer_rows=40,
                            seed=7, **extra, **kw)


def expected(store, case: str) -> Counter:
    """Every sample of the case's epoch: each step with an action (transitions), or a window of 4."""
    window = CASES[case][1].get("sequence_length", 2)
    return Counter((e, s) for e, n in enumerate(LENGTHS) for s in range(n + 2 - window))


def keys(batches) -> list[tuple[int, int]]:
    out = []
    for b in batches:
        e, s = (np.asarray(b[k]) for k in KEYS)
        e, s = (e[:, 0], s[:, 0]) if e.ndim == 2 else (e, s)  # (a window: its first step)
        out += list(zip(e.tolist(), s.tolist(), strict=True))
    return out


def test_the_store_has_the_row_groups_the_tests_deal(store):
    assert len(dataset(store, "transitions-shuffled").units) == 24


def stopped(ds, batches: int, loader=None) -> list[tuple[int, int]]:
    """The samples of the first ``batches`` batches of ``ds`` (through ``loader`` when given)."""
    it = iter(loader if loader is not None else ds)
    got = keys(next(it) for _ in range(batches))
    del it
    return got


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize(("before", "after"), [(4, 3), (2, 3)])
def test_a_resume_at_another_world_size_delivers_exactly_the_samples_not_yet_seen(store, case, before, after):
    """``before`` ranks stopped after 3 batches each, their states loaded by ``after`` ranks."""
    seen, states = [], []
    for rank in range(before):
        ds = dataset(store, case, rank=rank, world_size=before)
        seen += stopped(ds, 3)
        states.append(ds.state_dict())
    assert len(seen) == 3 * 8 * before
    rest, done, ended = [], Counter(), []
    before_done = {u for state in states for u in state["done"]}
    for rank in range(after):
        ds = dataset(store, case, rank=rank, world_size=after)
        ds.load_state_dict(states)
        rest += keys(ds)
        ended.append(ds.state_dict())
        assert ended[-1]["resumed"]
        done.update(r for u, r in ended[-1]["done"].items() if u not in before_done)
    assert Counter(seen) + Counter(rest) == expected(store, case)  # every sample once
    assert not set(seen) & set(rest)
    assert sorted(done) == list(range(after))  # the row groups left, each finished by one new reader
    assert max(done.values()) - min(done.values()) <= 1  # and dealt evenly
    whole = Ledger.of(ended)  # together, the states say the epoch is delivered
    assert not whole.partial and sorted(whole.done) == list(range(24))


def test_a_resumed_epoch_resumes_again_and_the_same_readers_continue_batch_for_batch(store):
    case = "windows-shuffled"
    states, seen = [], []
    for rank in range(4):
        ds = dataset(store, case, rank=rank, world_size=4)
        seen += stopped(ds, 2)
        states.append(ds.state_dict())
    again = []
    for rank in range(3):  # 4 -> 3, stopped again, then 3 -> 2
        ds = dataset(store, case, rank=rank, world_size=3)
        ds.load_state_dict(states)
        seen += stopped(ds, 2)
        again.append(ds.state_dict())
    for rank in range(2):
        ds = dataset(store, case, rank=rank, world_size=2)
        ds.load_state_dict(again)
        seen += keys(ds)
    assert Counter(seen) == expected(store, case)

    # the same readers: each continues where it stopped, the batches an uninterrupted epoch gives
    whole = keys(dataset(store, case, rank=1, world_size=2))
    ds = dataset(store, case, rank=1, world_size=2)
    head = stopped(ds, 3)
    resumed = dataset(store, case, rank=1, world_size=2)
    resumed.load_state_dict(ds.state_dict())
    assert head + keys(resumed) == whole


def test_a_resume_with_other_dataloader_workers_and_the_state_checked(store):
    case = "transitions-shuffled"
    ds = dataset(store, case)
    seen = stopped(ds, 5, DataLoader(ds, num_workers=2, persistent_workers=False))  # 2 readers
    state = ds.state_dict()
    assert state["readers"] == 2 and state["units"] == 24
    assert json.loads(json.dumps(state))  # (plain values: saved as JSON as well as with torch.save)
    resumed = dataset(store, case)
    resumed.load_state_dict(json.loads(json.dumps(state)))  # (JSON's string keys read back)
    rest = keys(DataLoader(resumed, num_workers=1, persistent_workers=False))  # 1 reader
    assert Counter(seen) + Counter(rest) == expected(store, case)
    # persistent workers resumed from a ledger: the epoch after it is whole again
    loader = DataLoader(resumed, num_workers=1)  # (persistent)
    assert Counter(keys(loader)) == expected(store, case) - Counter(seen)
    resumed.set_epoch(1)
    assert Counter(keys(loader)) == expected(store, case)
    with pytest.raises(ArgumentError, match="row groups"):
        dataset(store, case).load_state_dict({**state, "units": 23})
    with pytest.raises(ArgumentError, match="epochs"):
        dataset(store, case).load_state_dict([state, {**state, "epoch": 1}])


RANK = textwrap.dedent('''
    import json, sys
    import numpy as np
    import torch.distributed as dist
    sys.path[:0] = [sys.argv[4], sys.argv[4] + "/.."]  # (this module, and the tests' conftest)
    import test_distributed as t
    from rlarrow.train.torch import DataLoader

    store, out, stop = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    loaded = json.load(open(sys.argv[5])) if len(sys.argv) > 5 else {}
    results = {}
    for case in t.CASES:
        ds = t.dataset(store, case)
        if case in loaded:
            ds.load_state_dict(loaded[case])  # every rank's state: this rank's share of what is left
        got = []
        for i, batch in enumerate(DataLoader(ds, num_workers=2, persistent_workers=False)):
            got += t.keys([batch])  # (a batch the loader gave is delivered: the state counts it)
            if i + 1 == stop:
                break
        states = [None] * world
        dist.all_gather_object(states, ds.state_dict())
        results[case] = {"keys": got, "states": states}
    json.dump(results, open(f"{out}/rank{rank}.json", "w"))
    dist.destroy_process_group()
''')


def torchrun(tmp_path: Path, store: Path, ranks: int, stop: int, load: Path | None = None) -> list[dict]:
    """``torchrun --nproc-per-node=ranks`` of the script above; each rank's results."""
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    out = tmp_path / f"out{ranks}-{stop}"
    out.mkdir()
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
            os.fspath(script), os.fspath(store), os.fspath(out), str(stop), os.fspath(Path(__file__).parent)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*args, *([os.fspath(load)] if load else [])], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]


@pytest.mark.slow
def test_torchrun_ranks_times_workers_deliver_every_sample_once_evenly(tmp_path, store):
    """3 ranks x 2 workers (6 readers): every sample once; no reader more than a row group ahead."""
    results = torchrun(tmp_path, store, 3, 0)
    for case in CASES:
        got = Counter(k for r in results for k in map(tuple, r[case]["keys"]))
        assert got == expected(store, case), case
        states = results[0][case]["states"]
        assert all(s["readers"] == 6 for s in states)
        done = Counter(r for s in states for r in s["done"].values())  # row groups per reader
        assert sorted(int(r) for r in done) == list(range(6))
        assert sum(done.values()) == 24 and max(done.values()) - min(done.values()) <= 1


@pytest.mark.slow
def test_torchrun_4_ranks_stopped_resumed_by_3(tmp_path, store):
    first = torchrun(tmp_path, store, 4, 3)  # each rank stops after 3 batches
    saved = tmp_path / "states.json"
    saved.write_text(json.dumps({case: first[0][case]["states"] for case in CASES}))
    rest = torchrun(tmp_path, store, 3, 0, saved)
    for case in CASES:
        seen = Counter(tuple(k) for r in first for k in r[case]["keys"])
        assert sum(seen.values()) == 4 * 3 * 8
        after = Counter(tuple(k) for r in rest for k in r[case]["keys"])
        assert seen + after == expected(store, case), case


@pytest.mark.slow
def test_the_torchrun_recipe_of_docs_scale_md(tmp_path, store, monkeypatch):
    """docs/scale.md's train.py under torchrun (2 ranks x 2 workers), then its resume in one process."""
    import re

    section = (Path(__file__).parents[2] / "docs" / "scale.md").read_text().split("## Many nodes", 1)[1]
    train, resume = [b for b in re.findall(r"```py\n(.*?)```", section, re.S) if "StreamingDataset" in b]
    script = tmp_path / "train.py"
    script.write_text(train.replace('"runs.rlarrow"', repr(os.fspath(store))) + textwrap.dedent('''
        import json  # (the test's: what each rank saw, and the states)
        with open(f"rank{dist.get_rank()}.json", "w") as out:
            json.dump({"seen": int(batch["done"].numel()), "states": states}, out)
    '''))
    run = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    done = subprocess.run([*run, os.fspath(script)], cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    namespace = {"StreamingDataset": StreamingDataset, "states": ranks[0]["states"]}
    exec(compile(resume.replace('"runs.rlarrow"', repr(os.fspath(store))), "docs/scale.md", "exec"),  # noqa: S102
         namespace)
    rest = sum(len(b["done"]) for b in namespace["ds"])  # one reader now, where 4 were
    assert rest == sum(LENGTHS) - sum(r["seen"] for r in ranks) and sum(r["seen"] for r in ranks) > 0
