"""Mergeable normalisation statistics (rlarrow.core.stats): exact moments, sketch quantiles."""

from __future__ import annotations

import doctest
import importlib
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import rlarrow.core.stats as stats_module
from rlarrow.core.errors import (
    ArgumentError,
    ArgumentTypeError,
    CorruptFileError,
    MissingDependencyError,
    UsageError,
)
from rlarrow.core.stats import STATS_SCHEMA, ColumnStats, combine_rows, stats_table
from rlarrow.train.normalize import NormalizationMode, normalizer

pytest.importorskip("datasketches",
                    reason="quantile sketches need datasketches: pip install 'rlarrow[stats]'")

QS = (0.01, 0.1, 0.5, 0.9, 0.99)


def _split(data: np.ndarray, rng: np.random.Generator, max_parts: int = 50) -> list[np.ndarray]:
    """``data`` cut into 1..max_parts consecutive episodes of random lengths (some of 1 row)."""
    parts = int(rng.integers(1, max_parts + 1))
    cuts = np.sort(rng.choice(np.arange(1, len(data)), size=parts - 1, replace=False))
    return np.split(data, cuts)


def _episode_data(rng: np.random.Generator, rows: int, shape: tuple[int, ...] = (4,)) -> np.ndarray:
    """float32 rows whose elements sit at very different offsets (1e6 + noise among them)."""
    offsets = np.array([1e6, 0.0, -250.0, 3e4] * 8)[: int(np.prod(shape))].reshape(shape)
    scales = np.array([1.0, 1e-3, 7.0, 0.5] * 8)[: int(np.prod(shape))].reshape(shape)
    return (offsets + scales * rng.standard_normal((rows, *shape))).astype(np.float32)


def _three_ways(episodes: list[np.ndarray]) -> dict[str, ColumnStats]:
    """The statistics of all episodes, merged by combine, by merge one at a time, and from a table."""
    parts = [ColumnStats.from_array(e) for e in episodes]
    chained = ColumnStats(parts[0].shape)
    for part in parts:
        chained.merge(part)
    table = stats_table([("x", p) for p in parts])
    return {"combine": ColumnStats.combine(parts), "merge": chained, "rows": combine_rows(table)["x"]}


def _assert_rank_within(data: np.ndarray, q: float, value: float, tol: float) -> None:
    """``value`` is a q-quantile of ``data`` to within ``tol`` of rank (ties count either way)."""
    below = float(np.mean(data < value))
    at_or_below = float(np.mean(data <= value))
    assert below - tol <= q <= at_or_below + tol, (q, value, below, at_or_below, tol)


# --- moments -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_merged_moments_equal_numpy_over_the_concatenation(seed):
    rng = np.random.default_rng(seed)
    data = _episode_data(rng, int(rng.integers(60, 3000)))
    exact = data.astype(np.float64)
    for how, merged in _three_ways(_split(data, rng)).items():
        assert merged.count == len(data), how
        np.testing.assert_allclose(merged.mean, exact.mean(axis=0), rtol=1e-9, err_msg=how)
        np.testing.assert_allclose(merged.std, exact.std(axis=0), rtol=1e-9, err_msg=how)
        np.testing.assert_allclose(merged.var, exact.var(axis=0), rtol=1e-9, err_msg=how)
        assert np.array_equal(merged.min, exact.min(axis=0)), how
        assert np.array_equal(merged.max, exact.max(axis=0)), how
        assert merged.nan_count.tolist() == [0, 0, 0, 0]


def test_moments_keep_their_precision_far_from_zero():
    """1e9 + noise of 1e-3: a sum of squares would lose every digit of the variance."""
    rng = np.random.default_rng(7)
    data = 1e9 + 1e-3 * rng.standard_normal((5000, 1))
    parts = [ColumnStats.from_array(p) for p in _split(data, rng, 40)]
    merged = ColumnStats.combine(parts)
    np.testing.assert_allclose(merged.std, data.std(axis=0), rtol=1e-6)
    np.testing.assert_allclose(merged.mean, data.mean(axis=0), rtol=1e-15)
    naive_var = np.mean(data**2, axis=0) - np.mean(data, axis=0) ** 2  # what this avoids
    assert not np.allclose(naive_var, data.var(axis=0), rtol=0.5)
    np.testing.assert_allclose(merged.var, data.var(axis=0), rtol=1e-6)


def test_update_batch_by_batch_equals_one_batch():
    rng = np.random.default_rng(3)
    data = _episode_data(rng, 1000, (3, 2))
    stepwise = ColumnStats((3, 2))
    for batch in np.array_split(data, 17):
        stepwise.update(batch)
    whole = ColumnStats.from_array(data)
    np.testing.assert_allclose(stepwise.mean, whole.mean, rtol=1e-12)
    np.testing.assert_allclose(stepwise.m2, whole.m2, rtol=1e-9)
    assert stepwise.count == whole.count == 1000


# --- quantiles -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_merged_quantiles_are_within_the_sketch_rank_error(seed):
    rng = np.random.default_rng(100 + seed)
    # episodes drawn from different distributions: what the average of quantiles gets wrong
    episodes = []
    for i in range(int(rng.integers(20, 50))):
        rows = int(rng.integers(50, 2500))
        episodes.append((rng.standard_normal((rows, 3)) * (1 + i % 5) + i).astype(np.float32))
    data = np.concatenate(episodes).astype(np.float64)
    for how, merged in _three_ways(episodes).items():
        tol = 3 * merged.normalized_rank_error()
        assert 0.005 < merged.normalized_rank_error() < 0.02
        values = merged.quantile(list(QS))
        assert values.shape == (len(QS), 3)
        for qi, q in enumerate(QS):
            for j in range(3):
                _assert_rank_within(data[:, j], q, values[qi, j], tol)
        assert np.array_equal(merged.quantile(0.0), data.min(axis=0)), how
        assert np.array_equal(merged.quantile(1.0), data.max(axis=0)), how


def test_averaging_per_episode_quantiles_is_the_bug_this_avoids():
    """LeRobot issue 4156: a count-weighted average of q99s is no q99 of the union."""
    rng = np.random.default_rng(11)
    left = rng.normal(0.0, 1.0, 9000)
    right = rng.normal(40.0, 1.0, 1000)
    a, b = ColumnStats.from_array(left), ColumnStats.from_array(right)
    data = np.concatenate([left, right])
    averaged = (float(a.quantile(0.99)) * 9000 + float(b.quantile(0.99)) * 1000) / 10000
    tol = 3 * a.normalized_rank_error()
    below = float(np.mean(data < averaged))
    assert abs(below - 0.99) > 0.05  # the average sits far from the union's q99
    _assert_rank_within(data, 0.99, float(ColumnStats.combine([a, b]).quantile(0.99)), tol)


def test_small_columns_give_exact_quantiles():
    values = np.arange(1, 101, dtype=np.int64)
    stats = ColumnStats.from_array(values)
    assert stats.quantile([0.01, 0.5, 0.99]).tolist() == [1.0, 50.0, 99.0]
    assert np.quantile(values, [0.01, 0.5, 0.99], method="inverted_cdf").tolist() == [1, 50, 99]


# --- NaN, bool, int, shapes ----------------------------------------------------------------


def test_nans_are_counted_apart_and_left_out():
    rng = np.random.default_rng(5)
    data = rng.standard_normal((250, 3))
    data[rng.random(250) < 0.3, 0] = np.nan  # fewer than k values left: exact quantiles
    data[:, 2] = np.nan  # an element with no values at all
    merged = ColumnStats.combine([ColumnStats.from_array(p) for p in _split(data, rng, 10)])
    assert merged.count == 250
    assert merged.nan_count.tolist() == np.isnan(data).sum(axis=0).tolist()
    assert merged.valid_count.tolist() == (~np.isnan(data)).sum(axis=0).tolist()
    np.testing.assert_allclose(merged.mean[:2], np.nanmean(data[:, :2], axis=0), rtol=1e-12)
    np.testing.assert_allclose(merged.std[:2], np.nanstd(data[:, :2], axis=0), rtol=1e-12)
    assert merged.min[0] == np.nanmin(data[:, 0]) and merged.max[0] == np.nanmax(data[:, 0])
    assert np.isnan([merged.mean[2], merged.std[2], merged.min[2], merged.max[2]]).all()
    q = merged.quantile(0.5)
    assert np.isnan(q[2]) and not np.isnan(q[:2]).any()
    assert q[0] == np.quantile(data[~np.isnan(data[:, 0]), 0], 0.5, method="inverted_cdf")
    as_dict = merged.to_dict()
    assert as_dict["count"] == [250] and np.isnan(as_dict["q50"][2])
    back = ColumnStats.from_arrow_row(merged.to_arrow_row())
    assert back.nan_count.tolist() == merged.nan_count.tolist()
    assert np.isnan(back.mean[2]) and back.mean[0] == merged.mean[0]


def test_bool_and_int_columns_are_counted_as_numbers():
    flags = np.array([True, False, True, True])
    stats = ColumnStats.from_array(flags)
    assert float(stats.mean) == 0.75 and float(stats.min) == 0.0 and float(stats.max) == 1.0
    assert float(stats.quantile(0.5)) == 1.0
    ints = np.array([[0, 255], [10, 3], [7, 128]], dtype=np.uint8)
    merged = ColumnStats.combine([ColumnStats.from_array(ints[:1]), ColumnStats.from_array(ints[1:])])
    np.testing.assert_allclose(merged.mean, ints.mean(axis=0), rtol=1e-15)
    assert merged.max.tolist() == [10.0, 255.0]
    assert merged.quantile(0.5).tolist() == [7.0, 128.0]


def test_a_3_by_2_tensor_keeps_its_shape_in_every_output():
    rng = np.random.default_rng(9)
    data = rng.standard_normal((150, 3, 2))  # fewer than k: the quantiles are exact
    stats = ColumnStats.from_array(data)
    assert stats.shape == (3, 2)
    for name in ("mean", "std", "var", "min", "max", "m2", "nan_count", "valid_count"):
        assert getattr(stats, name).shape == (3, 2), name
    assert stats.quantile(0.5).shape == (3, 2) and stats.quantile([0.1, 0.9]).shape == (2, 3, 2)
    as_dict = stats.to_dict()
    assert sorted(as_dict) == ["count", "max", "mean", "min", "q01", "q10", "q50", "q90", "q99", "std"]
    assert as_dict["count"] == [150]
    for key, value in as_dict.items():
        if key != "count":
            assert np.asarray(value).shape == (3, 2), key
    np.testing.assert_allclose(as_dict["mean"], data.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(as_dict["q50"], np.quantile(data, 0.5, axis=0, method="inverted_cdf"))
    # a scalar column is [x] in stats.json, as LeRobot writes it
    scalar = ColumnStats.from_array(np.array([1.0, 2.0])).to_dict()
    assert scalar["mean"] == [1.5] and scalar["q50"] == [1.0] and scalar["count"] == [2]
    assert sorted(stats.to_dict(quantiles=[0.05])) == ["count", "max", "mean", "min", "q05", "std"]
    with pytest.raises(ArgumentError, match="share the keys"):
        stats.to_dict(quantiles=[0.001, 0.002])


# --- storage -------------------------------------------------------------------------------


def _row_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        np.array_equal(np.asarray(a[k], dtype=object if k == "sketches" else None),
                       np.asarray(b[k], dtype=object if k == "sketches" else None), equal_nan=k != "sketches")
        for k in a)


def test_arrow_row_round_trip_is_exact():
    rng = np.random.default_rng(2)
    stats = ColumnStats.from_array(rng.standard_normal((5000, 2, 2)), k=64)
    row = stats.to_arrow_row()
    assert set(row) == {f.name for f in STATS_SCHEMA} - {"column"}
    assert all(isinstance(b, bytes) for b in row["sketches"]) and len(row["sketches"]) == 4
    back = ColumnStats.from_arrow_row(row)
    assert back.shape == (2, 2) and back.k == 64 and back.count == 5000
    assert _row_equal(back.to_arrow_row(), row)
    assert np.array_equal(back.quantile(list(QS)), stats.quantile(list(QS)))
    assert back.normalized_rank_error() == stats.normalized_rank_error()


def test_a_stats_table_survives_parquet_and_merges_per_column(tmp_path):
    rng = np.random.default_rng(4)
    obs = [rng.standard_normal((int(rng.integers(1, 300)), 3)) for _ in range(12)]
    rew = [rng.standard_normal(len(o)) for o in obs]
    pairs = [pair for o, r in zip(obs, rew, strict=True)
             for pair in (("observation", ColumnStats.from_array(o)), ("reward", ColumnStats.from_array(r)))]
    table = stats_table(pairs).append_column("episode_id", pa.array(np.repeat(np.arange(12), 2)))
    pq.write_table(table, tmp_path / "stats.parquet")
    read = pq.read_table(tmp_path / "stats.parquet")
    merged = combine_rows(read, path=tmp_path / "stats.parquet")  # interleaved columns: the take path
    assert sorted(merged) == ["observation", "reward"]
    all_obs = np.concatenate(obs)
    np.testing.assert_allclose(merged["observation"].mean, all_obs.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(merged["reward"].std, np.concatenate(rew).std(), rtol=1e-12)
    # a selection: the even episodes
    chosen = read.filter(pc.equal(pc.bit_wise_and(read["episode_id"], 1), 0))
    some = combine_rows(chosen, columns=["observation"])
    assert list(some) == ["observation"]
    np.testing.assert_allclose(some["observation"].mean, np.concatenate(obs[::2]).mean(axis=0), rtol=1e-12)
    assert some["observation"].count == sum(len(o) for o in obs[::2])
    # moments only: no sketches read, no quantiles
    light = combine_rows(read.to_batches()[0], sketches=False)["observation"]
    np.testing.assert_allclose(light.mean, all_obs.mean(axis=0), rtol=1e-12)
    assert not light.has_quantiles and "q50" not in light.to_dict()
    with pytest.raises(UsageError, match="without sketches"):
        light.quantile(0.5)


def test_statistics_without_sketches_store_and_merge_as_such():
    light = ColumnStats.from_array(np.arange(10.0), sketches=False)
    row = light.to_arrow_row()
    assert row["sketches"] is None
    back = ColumnStats.from_arrow_row(row)
    assert not back.has_quantiles and float(back.mean) == 4.5
    full = ColumnStats.from_array(np.arange(10.0, 20.0))
    full.merge(back)  # one part without sketches: the merge has none
    assert not full.has_quantiles and full.count == 20 and float(full.mean) == 9.5


def test_empty_statistics_read_nan_and_round_trip():
    empty = ColumnStats((2,))
    assert empty.count == 0 and np.isnan(empty.mean).all() and np.isnan(empty.quantile(0.5)).all()
    back = ColumnStats.from_arrow_row(empty.to_arrow_row())
    back.merge(ColumnStats.from_array(np.array([[1.0, 2.0]])))
    assert back.mean.tolist() == [1.0, 2.0] and back.quantile(0.5).tolist() == [1.0, 2.0]


def _blob_row(n: int = 5000) -> dict:
    rng = np.random.default_rng(0)
    return ColumnStats.from_array(rng.standard_normal((n, 2))).to_arrow_row()


@pytest.mark.parametrize(("name", "damage", "message"), [
    ("truncated", lambda b: b[: len(b) // 2], "damaged"),
    ("preamble only", lambda b: b[:20], "too short"),  # crashes datasketches 5.2's deserialize
    ("one byte short", lambda b: b[:-1], "truncated"),
    ("padded", lambda b: b + b"\0" * 8, "padded"),
    ("empty", lambda b: b"", "shorter than"),
    ("not a sketch", lambda b: b"\x05\x01\x0f" + b"\xff" * 40, "damaged"),
    ("n changed", lambda b: b[:8] + (7).to_bytes(8, "little") + b[16:], "n=7"),
    ("wrong family", lambda b: b[:2] + b"\x07" + b[3:], "family 7"),
])
def test_a_damaged_sketch_raises_corrupt_file_error(name, damage, message):
    row = _blob_row()
    row["column"] = "observation"
    row["sketches"] = [row["sketches"][0], damage(row["sketches"][1])]
    with pytest.raises(CorruptFileError, match=message) as info:
        ColumnStats.from_arrow_row(row, path="runs/stats.parquet")
    text = str(info.value)
    assert "runs/stats.parquet" in text and "'observation'" in text and "element 1" in text
    assert "recompute" in text and info.value.path == "runs/stats.parquet"


def test_a_sketch_of_another_element_is_caught_by_its_count():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((300, 2))
    data[:10, 1] = np.nan
    row = ColumnStats.from_array(data).to_arrow_row()
    row["sketches"] = row["sketches"][::-1]
    with pytest.raises(CorruptFileError, match="holds 290 values but the statistics count 300"):
        ColumnStats.from_arrow_row(row)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("mean", [0.0], "1 mean values, not 2"),
    ("nan_count", [0, 6000], "NaN count outside"),
    ("count", -1, "negative count"),
    ("k", 3, "k outside"),
    ("shape", [-2], "negative dimension"),
    ("sketches", [b"x"], "row 0 has 1 sketches for 2 element"),
    ("min", None, "no min"),
    ("mean", "not numbers", "not a statistics row"),
])
def test_a_damaged_row_raises_corrupt_file_error(field, value, message):
    row = _blob_row(50)
    row[field] = value
    with pytest.raises(CorruptFileError, match=message):
        ColumnStats.from_arrow_row(row)


def test_every_truncation_of_a_sketch_is_refused_without_crashing():
    """Run apart: a blob that reached datasketches' deserialize could kill the interpreter."""
    code = textwrap.dedent("""
        import numpy as np
        from rlarrow.core.errors import CorruptFileError
        from rlarrow.core.stats import ColumnStats
        for n in (1, 2, 150, 5000):
            row = ColumnStats.from_array(np.random.default_rng(0).standard_normal(n)).to_arrow_row()
            blob = row["sketches"][0]
            for cut in [*range(min(len(blob), 80)), *range(80, len(blob), 23)]:
                row["sketches"] = [blob[:cut]]
                try:
                    ColumnStats.from_arrow_row(row)
                except CorruptFileError:
                    continue
                raise SystemExit(f"n={n}: a blob cut to {cut} of {len(blob)} bytes was accepted")
        print("all refused")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert "all refused" in done.stdout


def test_combine_rows_wants_a_statistics_table():
    with pytest.raises(ArgumentError, match="needs the columns"):
        combine_rows(pa.table({"column": ["x"]}))
    with pytest.raises(ArgumentTypeError):
        combine_rows({"column": ["x"]})  # type: ignore[arg-type]
    table = stats_table([("x", ColumnStats.from_array(np.zeros((3, 2)))),
                         ("x", ColumnStats.from_array(np.zeros((3, 3))))])
    with pytest.raises(CorruptFileError, match="row 1 has shape"):
        combine_rows(table)


# --- weighted mixtures ---------------------------------------------------------------------


def _mixture_data(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.normal(0.0, 1.0, (20000, 2)),
            np.column_stack([rng.normal(6.0, 2.0, 3000), rng.exponential(3.0, 3000)]),
            rng.uniform(-10.0, -4.0, (500, 2))]


def test_weighted_mixture_quantiles_match_the_exact_mixture():
    rng = np.random.default_rng(21)
    datasets = _mixture_data(rng)
    weights = np.array([0.5, 0.3, 0.2])
    parts = [ColumnStats.combine([ColumnStats.from_array(p) for p in _split(d, rng, 20)]) for d in datasets]
    mix = ColumnStats.combine(parts, weights=weights * 10)  # weights are normalised
    assert mix.is_mixture and mix.count == sum(len(d) for d in datasets)
    # moments of the mixture, from the data
    means = np.array([d.mean(axis=0) for d in datasets])
    mean = (weights[:, None] * means).sum(axis=0)
    var = (weights[:, None] * (np.array([d.var(axis=0) for d in datasets]) + (means - mean) ** 2)).sum(axis=0)
    np.testing.assert_allclose(mix.mean, mean, rtol=1e-12)
    np.testing.assert_allclose(mix.var, var, rtol=1e-12)
    assert np.array_equal(mix.min, np.min([d.min(axis=0) for d in datasets], axis=0))
    # quantiles against the exact mixture CDF: sum of w_i * F_i(x) over the data
    tol = 3 * mix.normalized_rank_error()
    values = mix.quantile(list(QS) + [0.0, 1.0])
    wrong = 0
    for qi, q in enumerate(list(QS) + [0.0, 1.0]):
        for j in range(2):
            x = values[qi, j]
            below = sum(w * np.mean(d[:, j] < x) for w, d in zip(weights, datasets, strict=True))
            at_or_below = sum(w * np.mean(d[:, j] <= x) for w, d in zip(weights, datasets, strict=True))
            assert below - tol <= q <= at_or_below + tol, (q, j, x, below, at_or_below)
            averaged = sum(w * p.quantile(q)[j] for w, p in zip(weights, parts, strict=True))
            avg_rank = sum(w * np.mean(d[:, j] <= averaged) for w, d in zip(weights, datasets, strict=True))
            wrong += abs(avg_rank - q) > tol
    assert wrong >= 4  # averaging the quantiles would have failed this test
    # the same mixture from a resample of the data: a large weighted draw
    draw = np.concatenate([d[rng.integers(0, len(d), int(200_000 * w))] for w, d in zip(weights, datasets,
                                                                                        strict=True)])
    for qi, q in enumerate(QS):
        for j in range(2):
            _assert_rank_within(draw[:, j], q, values[qi, j], tol + 0.01)


def test_weights_proportional_to_counts_are_the_plain_union():
    rng = np.random.default_rng(22)
    datasets = _mixture_data(rng)
    parts = [ColumnStats.from_array(d) for d in datasets]
    union = ColumnStats.combine(parts)
    mix = ColumnStats.combine(parts, weights=[p.count for p in parts])
    np.testing.assert_allclose(mix.mean, union.mean, rtol=1e-12)
    np.testing.assert_allclose(mix.std, union.std, rtol=1e-12)
    assert np.array_equal(mix.max, union.max) and np.array_equal(mix.min, union.min)
    data = np.concatenate(datasets)
    tol = 3 * union.normalized_rank_error()
    for q in QS:
        for j in range(2):
            a, b = mix.quantile(q)[j], union.quantile(q)[j]
            _assert_rank_within(data[:, j], q, a, tol)
            _assert_rank_within(data[:, j], q, b, tol)
            assert abs(np.mean(data[:, j] <= a) - np.mean(data[:, j] <= b)) <= 2 * tol


def test_an_element_a_part_has_no_values_of_mixes_the_other_parts():
    rng = np.random.default_rng(23)
    a = rng.normal(0.0, 1.0, (150, 2))
    b = rng.normal(10.0, 1.0, (150, 2))
    c = rng.normal(20.0, 1.0, (150, 2))
    a[:, 1] = np.nan  # the first part never saw element 1
    mix = ColumnStats.combine([ColumnStats.from_array(x) for x in (a, b, c)], weights=[0.5, 0.25, 0.25])
    # element 1 is b and c, half and half; element 0 is a, b, c at 0.5, 0.25, 0.25
    assert mix.mean[1] == pytest.approx((b[:, 1].mean() + c[:, 1].mean()) / 2, rel=1e-12)
    assert mix.mean[0] == pytest.approx(0.5 * a[:, 0].mean() + 0.25 * (b[:, 0].mean() + c[:, 0].mean()))
    both = np.concatenate([b[:, 1], c[:, 1]])  # exact: each part holds fewer than k values
    for q in (0.25, 0.5, 0.75):
        assert mix.quantile(q)[1] == np.quantile(both, q, method="inverted_cdf")
    assert mix.quantile(0.4)[0] < 5 < mix.quantile(0.6)[0]
    assert mix.nan_count.tolist() == [0, 150]


def test_a_mixture_is_for_reading_only():
    a = ColumnStats.from_array(np.zeros(10))
    b = ColumnStats.from_array(np.ones(10))
    mix = ColumnStats.combine([a, b], weights=[1, 0])
    assert float(mix.max) == 0.0 and float(mix.mean) == 0.0  # a zero weight leaves b out
    for call in (lambda: mix.merge(a), lambda: a.merge(mix), lambda: mix.update(np.zeros(2)),
                 lambda: mix.to_arrow_row(), lambda: stats_table({"x": mix})):
        with pytest.raises(UsageError, match="weighted mixture"):
            call()
    assert float(normalizer({"x": mix}, "quantile")({"x": np.zeros(1)})["x"][0]) == pytest.approx(-1.0)
    for bad in ([1.0], [-1.0, 2.0], [0.0, 0.0], [np.nan, 1.0]):
        with pytest.raises(ArgumentError, match="weight"):
            ColumnStats.combine([a, b], weights=bad)
    # a part kept without sketches: the mixture has moments, min and max, and no quantiles
    moments = ColumnStats.combine([a, ColumnStats.from_array(np.ones(30), sketches=False)], weights=[1, 1])
    assert float(moments.mean) == 0.5 and float(moments.std) == 0.5 and float(moments.max) == 1.0
    assert moments.is_mixture and not moments.has_quantiles
    with pytest.raises(UsageError, match="sketches"):
        moments.quantile(0.5)
    with pytest.raises(UsageError, match="weighted mixture"):
        moments.merge(a)


# --- normalisation -------------------------------------------------------------------------


def test_normalizer_modes_map_as_lerobot_and_openpi_do():
    rng = np.random.default_rng(30)
    data = rng.normal(3.0, 2.0, (4000, 2)).astype(np.float32)
    stats = {"observation": ColumnStats.from_array(data)}
    x = data.astype(np.float64)
    out = normalizer(stats, "mean_std")({"observation": data})["observation"]
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(out.std(axis=0), 1.0, rtol=1e-5)
    out = normalizer(stats, "min_max")({"observation": data})["observation"]
    np.testing.assert_allclose(out.min(axis=0), -1.0, atol=1e-6)
    np.testing.assert_allclose(out.max(axis=0), 1.0, atol=1e-6)
    lo, hi = stats["observation"].quantile([0.01, 0.99])
    out = normalizer(stats, "quantile")({"observation": data})["observation"]
    np.testing.assert_allclose(out, ((x - lo) / (hi - lo + 1e-8) * 2 - 1).astype(np.float32), rtol=1e-6)
    inside = np.mean((out >= -1) & (out <= 1), axis=0)
    assert np.all(np.abs(inside - 0.98) < 0.03)  # the outer 2 % fall beyond [-1, 1], not clipped
    assert out.min() < -1 and out.max() > 1


def test_normalizer_inverse_per_column_modes_and_checks():
    rng = np.random.default_rng(31)
    stats = {"action": ColumnStats.from_array(rng.uniform(-2, 5, (500, 3))),
             "reward": ColumnStats.from_array(rng.integers(0, 10, 500))}
    modes = {"action": "min_max", "reward": "mean_std"}
    batch = {"action": rng.uniform(-2, 5, (4, 8, 3)), "reward": np.array([1, 2, 3]), "done": np.array([True])}
    norm = normalizer(stats, modes)(batch)
    assert norm["reward"].dtype == np.float64 and norm["done"] is not None
    assert np.array_equal(norm["done"], batch["done"])  # a column without statistics passes through
    back = normalizer(stats, modes, inverse=True)(norm)
    np.testing.assert_allclose(back["action"], batch["action"], rtol=1e-12)
    np.testing.assert_allclose(back["reward"], batch["reward"], rtol=1e-12)
    with pytest.raises(ArgumentError, match="do not end in"):
        normalizer(stats)({"action": np.zeros((4, 2))})
    with pytest.raises(ArgumentError, match="not one of"):
        normalizer(stats, "z_score")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="without statistics"):
        normalizer(stats, {"observation": "min_max"})
    constant = {"c": ColumnStats.from_array(np.full(10, 4.0))}  # std 0, max = min: eps keeps it finite
    assert normalizer(constant)({"c": np.array([4.0, 5.0])})["c"].tolist() == [0.0, 1e8]
    assert normalizer(constant, "min_max")({"c": np.array([4.0])})["c"].tolist() == [-1.0]


# --- arguments, dependency, examples -------------------------------------------------------


def test_bad_arguments_are_rlarrow_errors():
    with pytest.raises(ArgumentTypeError, match="dtype"):
        ColumnStats.from_array(np.array(["a", "b"]))
    with pytest.raises(ArgumentError, match="leading rows axis"):
        ColumnStats.from_array(np.float64(1.0))
    with pytest.raises(ArgumentError, match="do not fit"):
        ColumnStats((2,)).update(np.zeros((3, 3)))
    with pytest.raises(ArgumentError, match="8 and 65535"):
        ColumnStats(k=4)
    with pytest.raises(ArgumentError, match="shape"):
        ColumnStats.from_array(np.zeros((2, 2))).merge(ColumnStats.from_array(np.zeros((2, 3))))
    with pytest.raises(ArgumentError, match="between 0 and 1"):
        ColumnStats.from_array(np.zeros(2)).quantile(1.5)
    with pytest.raises(ArgumentError, match="at least one"):
        ColumnStats.combine([])


def test_infinities_are_values_and_raise_no_warning():
    stats = ColumnStats.from_array(np.array([1.0, np.inf, 2.0]))
    stats.merge(ColumnStats.from_array(np.array([-np.inf])))
    assert float(stats.max) == np.inf and float(stats.min) == -np.inf and np.isnan(stats.mean)


def test_missing_datasketches_names_the_stats_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasketches", None)  # what an uninstalled package looks like
    with pytest.raises(MissingDependencyError, match=r"pip install 'rlarrow\[stats\]'"):
        ColumnStats.from_array(np.zeros(3))
    light = ColumnStats.from_array(np.zeros(3), sketches=False)  # moments need no extra
    assert float(light.mean) == 0.0
    table = stats_table({"x": light})
    assert combine_rows(table, sketches=False)["x"].count == 3


STATS_MODULES = ["rlarrow.core.stats", "rlarrow.core.stats.moments", "rlarrow.core.stats.sketches",
                 "rlarrow.core.stats.arrow_form", "rlarrow.core.stats.column",
                 "rlarrow.core.stats.lerobot_stats", "rlarrow.train.normalize"]


@pytest.mark.parametrize("name", STATS_MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_the_normalizer_moved_to_train_and_its_old_path_warns():
    with pytest.warns(DeprecationWarning, match=r"normalizer has moved to rlarrow.train.normalize"):
        old = stats_module.normalizer
    assert old is normalizer
    with pytest.warns(DeprecationWarning, match="NormalizationMode"):
        assert stats_module.NormalizationMode is NormalizationMode
    with pytest.raises(AttributeError):
        stats_module.no_such_name  # noqa: B018


def test_image_channel_stats_are_lerobots_shape_with_exact_merged_quantiles():
    from rlarrow.core.stats import ImageStats, image_channel_stats, lerobot_frames

    rng = np.random.default_rng(3)
    episodes = [rng.integers(0, 256, (n, 6, 5, 3), dtype=np.uint8) for n in (7, 150, 3)]
    parts = [image_channel_stats(e) for e in episodes]
    whole = ImageStats.combine(parts[::-1])  # any order: the same numbers
    forward = ImageStats.combine(parts).lerobot_entry()
    assert all(np.array_equal(v, forward[k]) for k, v in whole.lerobot_entry().items())
    seen = np.concatenate([e[lerobot_frames(len(e))] for e in episodes]).reshape(-1, 3) / 255.0
    entry = whole.lerobot_entry()
    assert entry["count"].tolist() == [7 + 100 + 3]  # LeRobot samples 100 of the 150 frames
    assert all(v.shape == (3, 1, 1) for k, v in entry.items() if k != "count")
    np.testing.assert_allclose(entry["mean"].reshape(-1), seen.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(entry["std"].reshape(-1), seen.std(axis=0), rtol=1e-9)
    for key, q in {"q01": 0.01, "q10": 0.1, "q50": 0.5, "q90": 0.9, "q99": 0.99}.items():
        want = np.quantile(seen, q, axis=0, method="inverted_cdf")
        np.testing.assert_array_equal(entry[key].reshape(-1), want)


def test_stats_of_a_store_of_several_algorithms_and_scalar_runs(tmp_path):
    """`rlarrow stats` over PPO-like and DQN-like runs (two steps layouts) and a run of scalars alone."""
    import json as _json

    from click.testing import CliRunner

    import rlarrow
    from rlarrow.cli.commands import cli
    from rlarrow.core.errors import RLArrowWarning

    st = rlarrow.Store.create(tmp_path / "s")
    for run, action in (("ppo", np.array([[0.5, 1.0], [0.25, 0.0], [0.0, 0.0]], np.float32)),
                        ("dqn", [1, 0, None])):
        st.append("steps", {"run_id": run, "episode_id": 0, "step": np.arange(3), "env_index": 0,
                            "observation": np.full((3, 2), 2.0, np.float32), "action": action,
                            "reward": [1.0, 3.0, None], "is_first": [True, False, False],
                            "is_last": [False, False, True], "is_terminal": [False, False, True]})
    st.append("scalars", {"run_id": "logs", "scope": "train", "tag": "loss", "step": [0], "value": [1.0]})
    with pytest.warns(RLArrowWarning, match=r"leave out action \(\(2,\) in steps; \(\) in steps.2\)"):
        out = CliRunner().invoke(cli, ["stats", str(tmp_path / "s")])
    assert out.exit_code == 0, out.output
    shown = _json.loads(out.output[out.output.index("{"):])
    assert "action" not in shown and shown["reward"]["mean"] == [2.0]  # every run's rewards, no action
    one = CliRunner().invoke(cli, ["stats", str(tmp_path / "s"), "--layout", "2"])
    assert one.exit_code == 0 and "action" in _json.loads(one.output[one.output.index("{"):])
