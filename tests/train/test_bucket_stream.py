"""StreamingDataset on a bucket: the S3 server the tests start (moto's server mode, ``tests/s3_server.py``).

The same seed gives the same samples from the bucket as from the local store (global shuffle,
windows that continue into other row groups and commits); the reader fetches each file's
footer once and only the column chunks a read needs; it reads ahead a bounded number of row
groups, in threads, and an error there reaches the caller naming the file.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import episode_columns

import rlarrow
from rlarrow.core.errors import CorruptFileError
from rlarrow.core.remote import RemoteStore, push
from rlarrow.train.samples import SampleSource

torch = pytest.importorskip("torch", reason="rlarrow.train.torch needs the torch extra")
from rlarrow.train.torch import StreamingDataset  # noqa: E402

LENGTHS = [6 + (e * 5) % 11 for e in range(24)]  # uneven episodes


def _rows(cols: dict, lo: int, hi: int | None = None) -> dict:
    """Rows ``lo:hi`` of an episode's columns."""
    out = {}
    for k, v in cols.items():
        if isinstance(v, dict):
            out[k] = _rows(v, lo, hi)
        elif isinstance(v, list | np.ndarray):
            out[k] = v[lo:hi]
        else:
            out[k] = v
    return out


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """A store of several files of small row groups: episodes straddle row groups and commits."""
    st = rlarrow.Store.create(tmp_path_factory.mktemp("bucket") / "s.rlarrow")
    tail = None
    for part in range(3):
        with st.writer("steps", row_group_bytes=4000) as w:
            if tail is not None:
                w.write(tail)  # the rest of the episode the commit before began
            for e in range(part * 8, (part + 1) * 8):
                cols = episode_columns("r", e, LENGTHS[e], image=False)
                if part < 2 and e == (part + 1) * 8 - 1:  # this one goes on in the next commit
                    w.write(_rows(cols, 0, 4))
                    tail = _rows(cols, 4)
                else:
                    w.write(cols)
    return st


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """Three files of 2,000 steps (a float32[64] observation: 0.5 MB a file), small row groups."""
    st = rlarrow.Store.create(tmp_path_factory.mktemp("wide") / "w.rlarrow")
    rng = np.random.default_rng(0)
    for part in range(3):
        i = np.arange(part * 2000, (part + 1) * 2000)
        step = i % 100
        with st.writer("steps", row_group_bytes=100_000) as w:
            w.write({"run_id": "r", "episode_id": i // 100, "step": step, "env_index": 0,
                     "observation": rng.standard_normal((2000, 64)).astype(np.float32),
                     "action": rng.standard_normal((2000, 2)).astype(np.float32),
                     "reward": rng.standard_normal(2000), "discount": np.ones(2000),
                     "is_first": step == 0, "is_last": step == 99, "is_terminal": step == 99})
    return st


def _batches(ds):
    return [{k: v.numpy() if isinstance(v, torch.Tensor) else {kk: vv.numpy() for kk, vv in v.items()}
             for k, v in b.items()} for b in ds]


def _assert_same(a, b):
    assert len(a) == len(b) > 1
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            pairs = [(x[k][kk], y[k][kk]) for kk in x[k]] if isinstance(x[k], dict) else [(x[k], y[k])]
            for p, q in pairs:
                assert p.dtype == q.dtype and p.shape == q.shape, k
                assert np.array_equal(p, q, equal_nan=True), k


@pytest.mark.parametrize("kind", ["transitions", "windows"])
def test_the_same_seed_gives_the_same_samples_from_the_bucket_as_from_disk(local, s3, kind):
    uri = f"{s3.prefix}/s.rlarrow"
    push(local, uri, progress=False)
    if kind == "transitions":
        make = lambda where: StreamingDataset(where, "transitions", batch_size=16, seed=3, buffer_rows=40)  # noqa: E731
    else:
        make = lambda where: StreamingDataset(where, columns=["observation", "action", "episode_id", "step"],  # noqa: E731
                                              sequence_length=5, batch_size=16, seed=3, buffer_rows=40)
    on_disk, on_bucket = make(local), make(uri)
    assert on_disk.source.prefetch == 0 and on_bucket.source.prefetch == 2  # (read ahead: the bucket only)
    assert len(on_bucket.units) == len(on_disk.units) > 6
    for epoch in (0, 1):
        on_disk.set_epoch(epoch)
        on_bucket.set_epoch(epoch)
        want = _batches(on_disk)
        _assert_same(want, _batches(on_bucket))
    if kind == "windows":  # windows of one episode, at consecutive steps, some across commits
        steps = np.concatenate([b["step"] for b in want])
        eps = np.concatenate([b["episode_id"] for b in want])
        assert (np.diff(steps, axis=1) == 1).all() and (eps == eps[:, :1]).all()
        assert len(steps) == sum(n + 1 - 4 for n in LENGTHS if n + 1 >= 5)  # every window once
    on_bucket.source.prefetch = 0  # read one by one: the same again
    _assert_same(want, _batches(on_bucket))


def test_the_bucket_reader_fetches_each_footer_once_and_only_the_columns_read(wide, s3, tmp_path):
    from counting_fs import bytes_by_node, counting

    def fetched() -> int:  # bytes read from the bucket so far
        return sum(bytes_by_node(tmp_path / "reads").values())

    uri = f"{s3.prefix}/w.rlarrow"
    push(wide, uri, progress=False)
    plain = RemoteStore(uri)
    remote = RemoteStore(plain.root, filesystem=counting(tmp_path / "reads", plain.filesystem))
    files = remote.files("steps")
    total = sum(i.size for i in plain.filesystem.get_file_info(files))
    before = fetched()
    ds = StreamingDataset(remote, columns=["reward"], batch_size=8, seed=0)
    planned = fetched() - before
    assert planned <= 3 * (64 << 10)  # planning reads the footers (pyarrow's 64 KB tail), not the files
    assert len(ds.units) > 3 * 4
    rows = sum(len(b["reward"]) for b in ds)
    assert rows == wide.row_count("steps") == 6000
    read = fetched() - before - planned
    # one column of ten: far from whole files (and no footer fetched again)
    assert 0 < read < total / 4, (read, total)
    every = StreamingDataset(remote, columns=["observation", "action", "reward", "discount"], batch_size=8)
    again = fetched()
    assert sum(len(b["reward"]) for b in every) == 6000
    # every column: each row group once (its footer fetched when planning, not again)
    assert fetched() - again < total * 1.05
    transitions = StreamingDataset(remote, "transitions", batch_size=8, seed=0)
    again = fetched()
    assert sum(len(b["reward"]) for b in transitions) == 6000 - 60
    # and the first rows of the row group after each, where an episode goes on (its first page
    # of each column: here, with row groups of 100 KB, the whole of it)
    assert fetched() - again < total * 2.2


class _Recording(SampleSource):
    """A source that records, as read_ahead runs, how many row groups were begun."""

    begun: list[int]
    lock = threading.Lock()

    def read_windows(self, unit, files):
        with self.lock:
            self.begun[0] += 1
        return super().read_windows(unit, files)


def test_read_ahead_is_bounded_keeps_the_order_and_raises_a_threads_error(local, s3):
    uri = f"{s3.prefix}/s.rlarrow"
    push(local, uri, progress=False)
    source = SampleSource.from_store(RemoteStore(uri), "steps", columns=["reward", "step"])
    assert source.prefetch == 2
    source.__class__ = _Recording
    source.begun = [0]
    order = source.units[::-1]
    handed = []
    for got in source.read_ahead(order, {}):
        handed.append(got.gather(np.arange(len(got)))["step"])
        # at most `prefetch` row groups read and not handed out, beside the one handed out
        assert source.begun[0] <= len(handed) + source.prefetch
    source.prefetch = 0
    alone = [w.gather(np.arange(len(w)))["step"] for w in source.read_ahead(order, {})]
    assert len(handed) == len(order) and all(np.array_equal(a, b) for a, b in zip(handed, alone, strict=True))
    # a file gone from the bucket after planning: the error comes out of the threads, naming it
    source.prefetch = 2
    victim = source.units[-1].file
    RemoteStore(uri).filesystem.delete_file(victim)
    with pytest.raises(CorruptFileError, match=victim.rsplit("/", 1)[1]):
        list(source.read_ahead(source.units, {}))


def test_dataloader_workers_on_the_bucket_deliver_every_sample_once(local, s3):
    """Workers forked after the main process planned on S3 read ahead in threads of their own."""
    from rlarrow.train.torch import DataLoader

    uri = f"{s3.prefix}/s.rlarrow"
    push(local, uri, progress=False)

    def keys(where):
        ds = StreamingDataset(where, columns=["reward", "episode_id", "step"], batch_size=16, seed=1)
        got = [(int(e), int(s)) for b in DataLoader(ds, num_workers=2)
               for e, s in zip(b["episode_id"], b["step"], strict=True)]
        return got

    on_bucket = keys(uri)
    assert len(on_bucket) == len(set(on_bucket)) == local.row_count("steps")
    assert sorted(on_bucket) == sorted(keys(local))
