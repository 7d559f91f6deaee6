"""rlarrow.io.postprocessing iterators: skrl's output, without skrl's bugs; and Arrow batches."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from test_memory_export import SKRL, fixture, needs_skrl, needs_torch

import rlarrow
from rlarrow.core.tensors import to_numpy
from rlarrow.io.postprocessing import ArrowMemoryFileIterator, MemoryFileIterator


@needs_skrl
@pytest.mark.parametrize("ext", ["pt", "npz", "csv"])
def test_same_output_as_skrls_iterator_except_csv_bools(ext):
    import torch
    from skrl.utils.postprocessing import MemoryFileIterator as SkrlIterator

    pattern = str(SKRL / "*" / "memories" / f"*.{ext}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        theirs = list(SkrlIterator(pattern))
    ours = list(MemoryFileIterator(pattern))
    assert [f for f, _ in ours] == [f for f, _ in theirs] and len(ours) == 2
    for (_, a), (_, b) in zip(theirs, ours, strict=True):
        assert list(a.keys()) == list(b.keys())
        for name in a:
            if ext == "pt":
                assert isinstance(b[name], torch.Tensor) and b[name].dtype == a[name].dtype
                assert torch.equal(torch.nan_to_num(a[name]), torch.nan_to_num(b[name]))
            elif ext == "npz":
                assert b[name].dtype == a[name].dtype
                assert np.array_equal(a[name], b[name], equal_nan=True)
            elif name in ("terminated", "truncated"):
                assert all(v is True for row in a[name] for v in row)  # skrl's bool("False")
                assert all(isinstance(v, bool) for row in b[name] for v in row)
            else:
                assert a[name] == b[name]  # the same floats, the same (rows, size) lists


@needs_torch
def test_csv_bools_are_the_real_ones():
    truth = np.load(fixture("wrapped", "npz"))["terminated"].reshape(-1, 1)
    [(_, data)] = list(MemoryFileIterator(str(fixture("wrapped", "csv"))))
    assert np.array(data["terminated"]).tolist() == truth.tolist()
    assert 0 < np.mean(data["terminated"]) < 1


def test_unknown_extension_is_named(tmp_path):
    (tmp_path / "m.txt").write_text("x")
    with pytest.raises(rlarrow.UnsupportedInputError, match="m.txt"):
        next(MemoryFileIterator(str(tmp_path / "*")))


@needs_torch
def test_arrow_iterator_streams_memory_rows():
    npz = np.load(fixture("wrapped", "npz"))
    pattern = str(SKRL / "wrapped" / "memories" / "*")
    it = ArrowMemoryFileIterator(pattern, num_envs=4, batch_rows=100)
    assert len(it) == 3
    per_file: dict[str, list] = {}
    for filename, batch in it:
        assert batch.num_rows <= 100
        per_file.setdefault(filename, []).append(batch)
    assert sorted(per_file) == sorted(p.name for p in (SKRL / "wrapped" / "memories").iterdir())
    for batches in per_file.values():
        states = np.concatenate([to_numpy(b.column("states")) for b in batches])
        assert states.tobytes() == npz["states"].reshape(256, 8).tobytes()
        env = np.concatenate([b.column("env_index").to_numpy() for b in batches])
        assert env.tolist() == [0, 1, 2, 3] * 64
