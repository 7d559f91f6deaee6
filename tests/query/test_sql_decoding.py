"""SQL over binary-layout tensors (the *_decoded views, tensor_<dtype>_<shape>), and thresholds."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import rlarrow
from rlarrow.cli.commands import main
from rlarrow.core import tensors
from rlarrow.query import connect, sql

DTYPES = ["float32", "float64", "int64", "uint8", "bool"]
SHAPES = [(), (3,), (2, 2)]
ROWS = 6


def _values(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, (ROWS, *shape)).astype(bool)
    if dtype == "int64":
        v = rng.integers(-(2**63), 2**63 - 1, (ROWS, *shape), dtype=np.int64)
        v.flat[0], v.flat[-1] = np.iinfo(np.int64).min, np.iinfo(np.int64).max  # beyond 2^53: exact
        return v
    if dtype == "uint8":
        return rng.integers(0, 256, (ROWS, *shape)).astype(np.uint8)
    v = rng.standard_normal((ROWS, *shape)).astype(dtype)
    v.flat[0], v.flat[1], v.flat[-1] = np.nan, np.inf, -0.0
    return v


@pytest.fixture
def binary_memory(tmp_path):
    rng = np.random.default_rng(7)
    st = rlarrow.Store.create(tmp_path / "s.rlarrow")
    columns: dict = {"run_id": "r", "snapshot_id": 0, "snapshot_name": "m", "memory_index": np.arange(ROWS),
                     "env_index": np.zeros(ROWS, np.int32), "memory_size": ROWS, "num_envs": 1,
                     "filled": np.ones(ROWS, bool)}
    for dtype in DTYPES:
        for shape in SHAPES:
            columns[f"{dtype}_{len(shape)}d"] = tensors.to_arrow(
                _values(dtype, shape, rng), tensors.tensor_type(dtype, shape, layout="binary"))
    st.append("memory", columns)
    return st


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if want.dtype.kind == "f":  # bit for bit: NaN, -0.0 and infinities as stored
        return bool(np.array_equal(got.view(f"u{want.dtype.itemsize}"), want.view(f"u{want.dtype.itemsize}")))
    return bool(np.array_equal(got, want))


def test_decoded_view_and_functions_give_store_read_values(binary_memory):
    stored = binary_memory.read("memory").sort_by("memory_index")
    con = connect(binary_memory)
    try:
        decoded = con.sql("select * from memory_decoded order by memory_index").to_arrow_table()
        for dtype in DTYPES:
            for shape in SHAPES:
                name = f"{dtype}_{len(shape)}d"
                assert isinstance(stored.schema.field(name).type, tensors.TensorType)
                want = tensors.to_numpy(stored.column(name))
                got = tensors.to_numpy(decoded.column(name))
                assert _same(got, want), (name, got, want)
                function = f"tensor_{dtype}" + ("_" + "x".join(map(str, shape)) if shape else "")
                query = f"select {function}({name}) as v from memory order by memory_index"
                by_function = con.sql(query).to_arrow_table()
                assert _same(tensors.to_numpy(by_function.column("v")), want), function
        # SQL reaches the elements: DuckDB arrays are 1-based
        first = con.sql("select float64_2d[1][2] as v from memory_decoded order by memory_index").fetchall()
        want64 = tensors.to_numpy(stored.column("float64_2d"))
        assert [r[0] for r in first][1:] == want64[1:, 0, 1].tolist()
        types = dict(con.sql("select column_name, column_type from (describe memory_decoded)").fetchall())
        assert types["uint8_2d"] == "UTINYINT[2][2]" and types["int64_0d"] == "BIGINT"
        assert types["bool_1d"] == "BOOLEAN[3]" and types["float32_1d"] == "FLOAT[3]"
    finally:
        con.close()


def test_a_blob_of_another_width_is_an_error_naming_the_function(binary_memory):
    con = connect(binary_memory)
    try:
        with pytest.raises(duckdb.Error, match=r"tensor_float32_2x2: a value of 3 bytes is not a float32 "
                                               r"\(2, 2\) tensor \(16 bytes\)"):
            con.sql("select tensor_float32_2x2(uint8_1d) from memory").fetchall()
    finally:
        con.close()


def test_steps_and_transitions_decoded_with_dict_observations_and_nulls(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s.rlarrow")
    n = 4
    pixels = np.arange(n * 2 * 3, dtype=np.uint8).reshape(n, 2, 3)
    position = np.linspace(0, 1, n * 2, dtype=np.float32).reshape(n, 2)
    action = tensors.to_arrow([np.array([i, -i], np.int64) for i in range(n - 1)] + [None],
                              tensors.tensor_type("int64", (2,), layout="binary"))
    st.append("steps", {
        "run_id": "a", "episode_id": 0, "step": np.arange(n), "env_index": 0,
        "observation": pa.StructArray.from_arrays(
            [tensors.to_arrow(pixels, tensors.tensor_type("uint8", (2, 3), layout="binary")),
             tensors.to_arrow(position)], names=["pixels", "position"]),
        "action": action, "reward": [1.0, 2.0, 3.0, None], "discount": [1.0, 1.0, 0.0, None],
        "is_first": [True, False, False, False], "is_last": [False, False, False, True],
        "is_terminal": [False, False, False, True]})
    con = connect(st)
    try:
        rows = con.sql("select observation, action from steps_decoded order by step").fetchall()
        assert [list(map(list, r[0]["pixels"])) for r in rows] == pixels.tolist()
        assert [list(r[0]["position"]) for r in rows] == position.tolist()
        assert [None if r[1] is None else list(r[1]) for r in rows] == [[0, 0], [1, -1], [2, -2], None]
        t = con.sql("select step, observation.pixels as o, next_observation.pixels as n, action "
                    "from transitions_decoded order by step").to_arrow_table()
        assert t.column("step").to_pylist() == [0, 1, 2]
        assert np.array_equal(tensors.to_numpy(t.column("o")), pixels[:3])
        assert np.array_equal(tensors.to_numpy(t.column("n")), pixels[1:])
        assert tensors.to_numpy(t.column("action")).tolist() == [[0, 0], [1, -1], [2, -2]]
        # the plain views still hold the bytes
        assert con.sql("select typeof(action) from steps limit 1").fetchall()[0] == ("BLOB",)
    finally:
        con.close()


def test_decoded_views_exist_without_binary_tensors(populated):
    con = connect(populated)
    try:
        for view in ("steps", "memory", "transitions"):
            plain = con.sql(f"select count(*) from {view}").fetchall()[0]
            assert con.sql(f"select count(*) from {view}_decoded").fetchall()[0] == plain
    finally:
        con.close()


def test_cli_sql_decoded_json(binary_memory, capsys):
    with pytest.raises(SystemExit) as done:
        main(["sql", str(binary_memory.path), "select int64_1d, uint8_2d from memory_decoded "
              "order by memory_index limit 1", "--format", "json"])
    assert done.value.code == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    stored = binary_memory.read("memory").sort_by("memory_index")
    assert row["int64_1d"] == tensors.to_numpy(stored.column("int64_1d"))[0].tolist()
    assert row["uint8_2d"] == tensors.to_numpy(stored.column("uint8_2d"))[0].tolist()


def test_steps_to_threshold_above_and_below(tmp_path):
    with rlarrow.Store.create(tmp_path / "s.rlarrow") as st:
        st.append("scalars", {"run_id": "a", "scope": "train", "tag": "train/loss", "step": np.arange(5) * 10,
                              "value": [1.0, 0.5, 0.04, 0.01, 0.2]})
        st.append("scalars", {"run_id": "b", "scope": "train", "tag": "train/loss", "step": [0, 10],
                              "value": [0.9, 0.8]})
    path = tmp_path / "s.rlarrow"
    above = sql(path, "select * from steps_to_threshold('train/loss', 0.05)").to_pylist()
    assert above == [{"run_id": "a", "step": 0}, {"run_id": "b", "step": 0}]
    below = sql(path, "select * from steps_to_threshold('train/loss', 0.05, direction := 'below')")
    assert below.to_pylist() == [{"run_id": "a", "step": 20}, {"run_id": "b", "step": None}]
    explicit = sql(path, "select * from steps_to_threshold('train/loss', 0.6, direction := 'above')")
    assert explicit.to_pylist() == [{"run_id": "a", "step": 0}, {"run_id": "b", "step": 0}]
    with pytest.raises(duckdb.Error, match="direction must be 'above'.* or 'below'.*not down"):
        sql(path, "select * from steps_to_threshold('train/loss', 0.05, direction := 'down')")
