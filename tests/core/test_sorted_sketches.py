"""KLL sketches laid out from sorted values (rlarrow.core.stats.sketches.sorted_sketch_blobs).

The recorders' statistics summarise each commit's sorted columns into DataSketches' bytes
instead of calling its ``update``, which holds the interpreter's lock. What this rests on:
every blob is a sketch DataSketches accepts and merges, holds exactly the values' count,
minimum and maximum, and ranks every value within ``2/k`` of its true rank.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlarrow.core.stats.sketches import feed_sketches, kll_blob_problem, sorted_sketch_blobs

ds = pytest.importorskip("datasketches",
                         reason="quantile sketches need datasketches: pip install 'rlarrow[stats]'")

K = 200
SIZES = [1, 2, 3, 199, 200, 201, 533, 534, 1000, 1155, 1156, 4097, 10_001, 65_536, 300_000]


@pytest.mark.parametrize("n", SIZES)
def test_each_blob_is_a_sketch_of_the_values_within_two_over_k(n: int) -> None:
    rng = np.random.default_rng(n)
    rows = np.sort(rng.standard_normal((3, n)), axis=1)
    rows[1] = np.sort(rng.integers(-5, 5, n))  # ties
    for blob, row in zip(sorted_sketch_blobs(rows, K), rows, strict=True):
        assert kll_blob_problem(blob) is None
        sketch = ds.kll_doubles_sketch.deserialize(blob)
        assert (sketch.n, sketch.get_min_value(), sketch.get_max_value()) == (n, row[0], row[-1])
        assert sketch.num_retained <= max(n, 1)
        probe = np.unique(row[:: max(1, n // 500)])
        est = np.array([sketch.get_rank(v, True) for v in probe])
        true = np.searchsorted(row, probe, side="right") / n
        assert np.max(np.abs(est - true)) < 2 / K


def test_small_inputs_are_kept_exactly() -> None:
    row = np.array([[0.5, 1.5, 2.5, 3.5]])
    sketch = ds.kll_doubles_sketch.deserialize(sorted_sketch_blobs(row, K)[0])
    assert sorted(v for v, _ in sketch) == [0.5, 1.5, 2.5, 3.5]
    assert sketch.get_quantile(0.5, True) == 1.5


def test_blobs_merge_with_datasketches_own_and_are_deterministic() -> None:
    rng = np.random.default_rng(0)
    row = np.sort(rng.standard_normal((1, 50_000)), axis=1)
    first, again = sorted_sketch_blobs(row, K)[0], sorted_sketch_blobs(row, K)[0]
    assert first == again  # the same commit gives the same statistics, run after run
    theirs = ds.kll_doubles_sketch(K)
    theirs.update(rng.standard_normal(20_000))
    for _ in range(5):
        theirs.merge(ds.kll_doubles_sketch.deserialize(first))
    assert theirs.n == 20_000 + 5 * 50_000
    assert kll_blob_problem(bytes(theirs.serialize())) is None
    assert abs(theirs.get_quantile(0.5) - 0.0) < 0.05


def test_feed_sketches_leaves_nan_out_per_element() -> None:
    values = np.arange(3000, dtype=np.float32).reshape(1000, 3)
    values[::2, 1] = np.nan
    sketches = [ds.kll_doubles_sketch(K) for _ in range(3)]
    feed_sketches(sketches, values)
    assert [s.n for s in sketches] == [1000, 500, 1000]
    assert sketches[1].get_min_value() == 4.0 and sketches[1].get_max_value() == 2998.0
    exact = np.sort(values[:, 2])
    assert abs(sketches[2].get_rank(float(exact[499]), True) - 0.5) < 2 / K
