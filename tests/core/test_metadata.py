"""Metadata of any nesting round-trips exactly and is queryable by key from DuckDB and Polars."""

from __future__ import annotations

import json
import math

import duckdb
import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlarrow.core import metadata


def same(a, b) -> bool:
    """Equal values of identical types, all the way down (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, (np.floating, float)):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, np.complexfloating):
        return same(a.real, b.real) and same(a.imag, b.imag)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


RICH = {
    "params": {"lr": np.float64(0.0003), "gamma": np.float32(0.99), "half": np.float16(0.1)},
    "ints": [np.int8(-128), np.uint64(2**64 - 1), np.int64(-(2**63)), 2**70],
    "flags": (True, np.bool_(False), None),
    "specials": [float("nan"), float("inf"), -0.0, np.float32("-inf")],
    "arrays": {
        "img": np.arange(12, dtype=np.uint8).reshape(3, 4),
        "zero_d": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.int32),
        "nan": np.array([np.nan, 1.0, -np.inf]),
        "complex": np.array([1 + 2j, np.nan + 0j], dtype=np.complex64),
        "text": np.array(["a", "bc"]),
        "bools": np.array([[True], [False]]),
    },
    "text": "héllo",
    "blob": b"\x00\xff",
    3: "int key",
    "nested": [[{"deep": [np.int32(1), (2, 3)]}]],
    "c": np.complex128(1 - 1j),
    "s": np.str_("numpy text"),
    "b": np.bytes_(b"raw"),
}


def test_rich_value_roundtrips_exactly():
    text, types = metadata.encode(RICH)
    assert same(metadata.decode(text, types), RICH)


def test_plain_json_needs_no_types():
    value = {"a": [1, 2.5, "x", None, True], "b": {"c": {}}}
    text, types = metadata.encode(value)
    assert types is None
    assert metadata.decode(text) == value


def test_none_is_a_null_cell():
    assert metadata.encode(None) == (None, None)
    assert metadata.decode(None, None) is None


@pytest.mark.parametrize(("value", "where"), [
    ({"a": {"b": {1, 2}}}, "a.b"),
    ({"a": [object()]}, "a[0]"),
    ({"k": np.array([object()])}, "k"),
    ({(1, 2): 3}, "dict key"),
])
def test_unsupported_values_name_their_path(value, where):
    with pytest.raises(TypeError, match=where.replace("[", r"\[").replace("]", r"\]")):
        metadata.encode(value)


def test_queryable_by_key_from_duckdb_and_polars(populated):
    glob = str(populated.path / "runs" / "*.parquet")
    lr = duckdb.sql(f"select metadata->>'$.params.lr' as lr, metadata->>'$.tags[1]' as tag "
                    f"from read_parquet('{glob}')").fetchall()
    assert lr == [("0.0003", "b")]
    gamma = pl.scan_parquet(glob).select(
        pl.col("metadata").str.json_path_match("$.params.gamma")).collect().item()
    assert float(gamma) == float(np.float32(0.99))
    steps = str(populated.path / "steps" / "*.parquet")
    x = duckdb.sql(f"select cast(metadata->>'$.info.x' as double) from read_parquet('{steps}') "
                   "where step = 3 and episode_id = 0").fetchall()[0][0]
    assert x == 1.5


json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5), st.binary(max_size=5),
    st.integers(-(2**63), 2**63 - 1).map(np.int64), st.floats(width=32).map(np.float32),
    st.booleans().map(np.bool_),
)
trees = st.recursive(
    json_leaves,
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.tuples(kids, kids),
                           st.dictionaries(st.one_of(st.text(max_size=4), st.integers(0, 5)), kids,
                                           max_size=4)),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(value=trees)
def test_any_tree_roundtrips(value):
    if _colliding_keys(value):  # a str key and an int key that print alike
        with pytest.raises(TypeError, match="collide"):
            metadata.encode(value)
        return
    text, types = metadata.encode(value)
    assert same(metadata.decode(text, types), value)


def _colliding_keys(value) -> bool:
    if isinstance(value, dict):
        keys = [str(k) for k in value]
        return len(set(keys)) < len(keys) or any(_colliding_keys(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_colliding_keys(v) for v in value)
    return False


def _rows(columns: dict[str, np.ndarray]) -> list[dict]:
    """Row i as the nested dict encode_rows encodes: {path parts...: array[i]}."""
    out = []
    for i in range(len(next(iter(columns.values())))):
        row: dict = {}
        for path, values in columns.items():
            *parents, last = path.split("/")
            node = row
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = values[i]
        out.append(row)
    return out


def _same(a, b) -> bool:
    """Equal values of equal types, NaN equal to NaN and -0.0 told from 0.0."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if type(a) is not type(b):
        return False
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f") \
        and (a.dtype.kind != "f" or np.array_equal(np.signbit(a), np.signbit(b)))


@pytest.mark.parametrize("kind", ["finite", "nonfinite", "negative zero", "strings", "empty", "zero size",
                                  "long double"])
def test_encode_rows_decodes_to_what_encode_column_encodes(kind):
    rng = np.random.default_rng(0)
    columns = {"infos/qpos": rng.standard_normal((7, 3)).astype(np.float32),
               "infos/qvel": rng.standard_normal((7, 2, 2)) * 10.0 ** rng.integers(-30, 30, (7, 2, 2)),
               "infos/inner/ok": rng.random(7) < 0.5,
               "dones": rng.integers(0, 2, 7).astype(np.int64),
               "t": np.arange(7, dtype=np.uint64) + np.uint64(2**63),
               "half": rng.standard_normal(7).astype(np.float16),
               "whole": np.array([1.0, 0.0, 2.0, 1e16, 1e-5, 5e-324, 123456.0])}
    if kind == "nonfinite":
        columns["infos/qvel"][2, 1, 0] = np.nan
        columns["infos/qpos"][4, 0] = -np.inf
        columns["half"][3] = np.inf
    if kind == "negative zero":
        columns["infos/qpos"][1, 1] = -0.0
    if kind == "strings":
        columns["name"] = np.array([f"demo_{i}" for i in range(7)])
    if kind == "empty":
        columns = {k: v[:0] for k, v in columns.items()}
    if kind == "zero size":
        columns["none"] = np.zeros((7, 0), np.float32)
    if kind == "long double":  # (Arrow has no such type: the general path)
        columns["ld"] = np.arange(7, dtype=np.longdouble) / 3
    texts, types = metadata.encode_rows(columns)
    want_texts, want_types = metadata.encode_column(_rows(columns))
    assert types.to_pylist() == want_types
    for text, tag, want in zip(texts.to_pylist(), types.to_pylist(), want_texts, strict=True):
        got, expected = metadata.decode(text, tag), metadata.decode(want, tag)
        assert _same(got, expected), (text, want)
        assert isinstance(json.loads(text)["infos"]["qpos"], list)  # plain JSON, queryable by key
