"""Tensor columns round-trip value-exactly through a store: dtype, shape, NaN, extremes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import rlarrow
from rlarrow.core import tensors

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOAT_DTYPES = [np.float16, np.float32, np.float64]


def exact_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bits (NaN == NaN, -0.0 != 0.0)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "fiub":
        return a.tobytes() == np.ascontiguousarray(b).tobytes()
    return bool(np.array_equal(a, b))


def memory_rows(**tensor_columns):
    n = len(next(iter(tensor_columns.values())))
    return {"run_id": "r", "snapshot_id": 0, "memory_index": np.arange(n), "env_index": 0,
            "memory_size": n, "num_envs": 1, **tensor_columns}


def roundtrip(store, **tensor_columns):
    store.append("memory", memory_rows(**tensor_columns))
    table = store.read("memory")
    return {name: tensors.to_numpy(table.column(name)) for name in tensor_columns}


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_integer_extremes(store, dtype):
    info = np.iinfo(dtype)
    values = np.array([[info.min, info.max], [0, 1], [info.max, info.min]], dtype=dtype)
    back = roundtrip(store, x=values)["x"]
    assert exact_equal(values, back)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_float_specials(store, dtype):
    finfo = np.finfo(dtype)
    values = np.array([[np.nan, np.inf, -np.inf], [-0.0, 0.0, finfo.tiny],
                       [finfo.max, finfo.min, finfo.eps]], dtype=dtype)
    back = roundtrip(store, x=values)["x"]
    assert exact_equal(values, back)
    assert np.signbit(back[1, 0]) and not np.signbit(back[1, 1])


def test_bool_images_and_scalars(store):
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (4, 84, 84, 3), dtype=np.uint8)
    flags = rng.random((4, 1)) > 0.5
    scalar = np.array([1.5, -2.0, np.nan, 4.0], np.float32)
    back = roundtrip(store, frames=frames, flags=flags, scalar=scalar)
    assert exact_equal(frames, back["frames"])
    assert exact_equal(flags, back["flags"])
    assert exact_equal(scalar, back["scalar"])
    schema = store.schema("memory")
    assert schema.field("frames").type == tensors.tensor_type("uint8", (84, 84, 3))
    assert schema.field("scalar").type == pa.float32()


def test_dict_observations_become_structs(store):
    obs = {"pixels": np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3),
           "state": {"pos": np.array([[1.0, 2.0], [3.0, np.nan]]), "flag": np.array([True, False])}}
    cols = {"run_id": "r", "episode_id": 0, "step": [0, 1], "env_index": 0, "observation": obs,
            "is_first": [True, False], "is_last": [False, True], "is_terminal": [False, False]}
    store.append("steps", cols)
    back = tensors.to_numpy(store.read("steps").column("observation"))
    assert exact_equal(obs["pixels"], back["pixels"])
    assert exact_equal(obs["state"]["pos"], back["state"]["pos"])
    assert exact_equal(obs["state"]["flag"], back["state"]["flag"])
    assert pa.types.is_struct(store.schema("steps").field("observation").type)


def test_per_row_sequences_with_null_rows():
    column = tensors.to_arrow([np.array([1, 2]), None, np.array([5, 6])])
    assert column.null_count == 1 and column.type == tensors.tensor_type("int64", (2,))
    with pytest.raises(ValueError, match="fill_value"):
        tensors.to_numpy(column)
    assert tensors.to_numpy(column, fill_value=-1).tolist() == [[1, 2], [-1, -1], [5, 6]]
    floats = tensors.to_numpy(tensors.to_arrow([np.ones(2), None]))
    assert np.isnan(floats[1]).all() and (floats[0] == 1).all()
    # slices keep their offset
    assert tensors.to_numpy(column.slice(2), fill_value=0).tolist() == [[5, 6]]


def test_fixed_shape_tensor_extension_is_accepted():
    ext = pa.FixedShapeTensorArray.from_numpy_ndarray(np.arange(12, dtype=np.float32).reshape(2, 2, 3))
    stored = tensors.to_arrow(ext)
    assert stored.type == tensors.tensor_type("float32", (2, 3))
    assert tensors.to_numpy(stored).tolist() == np.arange(12).reshape(2, 2, 3).tolist()


def test_ragged_rows_are_refused_with_a_reason():
    with pytest.raises(TypeError, match="same shape"):
        tensors.to_arrow([np.zeros(2), np.zeros(3)])


def test_tensor_problems_explain_the_rule():
    assert tensors.tensor_problems(pa.list_(pa.float32()), "obs")[0].startswith("obs: list<")
    assert tensors.is_tensor_type(pa.struct([("a", pa.list_(pa.uint8(), 4))]))
    assert not tensors.is_tensor_type(pa.map_(pa.string(), pa.int64()))


tensor_arrays = st.sampled_from(INT_DTYPES + FLOAT_DTYPES + [np.bool_]).flatmap(
    lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4))
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=tensor_arrays)
def test_any_dtype_and_shape_roundtrips_through_parquet(tmp_path_factory, values):
    store = rlarrow.Store.create(tmp_path_factory.mktemp("h") / "s")
    back = roundtrip(store, x=values)["x"]
    assert exact_equal(values, back)


def test_binary_layout_round_trips_and_converts():
    frames = np.random.default_rng(0).integers(0, 256, (6, 84, 84), dtype=np.uint8)
    t = tensors.tensor_type("uint8", (84, 84), layout="auto")
    assert isinstance(t, tensors.TensorType) and t.storage_type == pa.binary(7056)
    assert tensors.tensor_type("float32", (8,), layout="auto") == pa.list_(pa.float32(), 8)
    assert isinstance(tensors.tensor_type("float32", (10, 5), layout="auto"), tensors.TensorType)
    assert isinstance(tensors.tensor_type("float32", (2048,), layout="auto"), tensors.TensorType)
    col = tensors.to_arrow(frames, t)
    back = tensors.to_numpy(col)
    assert back.dtype == np.uint8 and np.array_equal(back, frames)
    assert tensors.tensor_shape(t) == (84, 84) and tensors.tensor_dtype(t) == pa.uint8()
    # layouts convert both ways, nulls kept
    nested = tensors.to_arrow(frames)
    assert tensors.to_arrow(nested, t).equals(col)
    masked = tensors.with_null_rows(col, np.array([0, 1, 0, 0, 0, 1], bool))
    assert masked.null_count == 2
    assert tensors.to_numpy(tensors.to_arrow(masked, nested.type), fill_value=0)[1].sum() == 0
    with pytest.raises(ValueError, match="null row"):
        tensors.to_numpy(masked)
    binary_f32 = tensors.tensor_type("float32", (40, 40), layout="binary")
    floats = tensors.to_arrow(np.ones((3, 40, 40), np.float32), binary_f32)
    assert np.isnan(tensors.to_numpy(tensors.with_null_rows(floats, np.array([1, 0, 0], bool)))[0]).all()
    with pytest.raises(TypeError, match="do not fit"):
        tensors.to_arrow(np.full((1, 2), 300, np.int64), tensors.tensor_type("uint8", (2,), layout="binary"))
    with pytest.raises(TypeError, match="binary layout holds"):
        tensors.TensorType("U3", (2,))


def test_binary_layout_in_a_store_reads_in_every_engine(tmp_path):
    import duckdb
    import polars as pl

    store = rlarrow.Store.create(tmp_path / "s")
    frames = np.random.default_rng(1).integers(0, 256, (5, 64, 64), dtype=np.uint8)
    store.declare("steps", {"observation": tensors.tensor_type("uint8", (64, 64), layout="binary"),
                            "action": pa.int64()})
    store.append("steps", {"run_id": "r", "episode_id": 0, "step": np.arange(5), "env_index": 0,
                           "observation": frames, "action": [0, 1, 0, 1, None],
                           "is_first": np.arange(5) == 0, "is_last": np.arange(5) == 4,
                           "is_terminal": np.zeros(5, bool)})
    back = tensors.to_numpy(store.read("steps").column("observation"))
    assert np.array_equal(back, frames)
    files = [str(p) for p in store.files("steps")]
    blobs = duckdb.execute(f"select observation, octet_length(observation) from read_parquet({files}) "
                           "order by step").fetchall()
    assert [n for _, n in blobs] == [4096] * 5
    assert np.frombuffer(blobs[2][0], np.uint8).reshape(64, 64).tolist() == frames[2].tolist()
    df = pl.read_parquet(files).select("step", "observation")
    assert df.height == 5 and df["step"].to_list() == [0, 1, 2, 3, 4]


def test_binary_layout_survives_compaction_and_info(tmp_path):
    from click.testing import CliRunner

    from rlarrow.cli.commands import cli

    store = rlarrow.Store.create(tmp_path / "s", auto_compact=None)
    t = tensors.tensor_type("float32", (32, 32), layout="binary")
    store.declare("steps", {"observation": t, "action": pa.int64()})
    rng = np.random.default_rng(2)
    frames = rng.standard_normal((12, 32, 32)).astype(np.float32)
    for i in range(4):
        store.append("steps", {"run_id": "r", "episode_id": i, "step": np.arange(3), "env_index": 0,
                               "observation": frames[3 * i:3 * i + 3], "action": [0, 1, None],
                               "is_first": [True, False, False], "is_last": [False, False, True],
                               "is_terminal": [False, False, True]})
    assert store.compact("steps") == {"steps": (4, 1)}
    back = store.read("steps")
    assert back.schema.field("observation").type == t
    assert tensors.to_numpy(back.column("observation")).tobytes() == frames.tobytes()
    out = CliRunner().invoke(cli, ["info", str(tmp_path / "s")])
    assert out.exit_code == 0 and "steps.observation" in out.output and "rlarrow.tensor" in out.output


@pytest.mark.parametrize("layout", ["binary", "list"])
def test_large_chunked_columns_join_in_threads_as_one_chunk_would(layout):
    """A column of many chunks over the join threshold (joined by threads into one array)
    gives what the same column in one chunk gives: values, NaN, nulls filled, structs."""
    rng = np.random.default_rng(3)
    rows = [30_000, 1, 0, 41_000, 7_000]  # 78,001 rows of 64 float32: 20 MB
    chunks, wanted = [], []
    for k, n in enumerate(rows):
        values = rng.standard_normal((n, 64)).astype(np.float32)
        if n > 1:
            values[n // 2, 5] = np.nan
        arr = tensors.to_arrow(values, tensors.tensor_type(np.float32, (64,), layout=layout))
        if k == 3:  # null rows in one chunk
            nulls = np.zeros(n, bool)
            nulls[[0, 17, n - 1]] = True
            arr = tensors.with_null_rows(arr, nulls)
            values = values.copy()
            values[nulls] = np.nan
        chunks.append(arr)
        wanted.append(values)
    column = pa.chunked_array(chunks, type=chunks[0].type)
    assert column.nbytes >= tensors._JOIN_BYTES and column.num_chunks == len(rows)
    got = tensors.to_numpy(column)
    one = tensors.to_numpy(column.combine_chunks())
    want = np.concatenate(wanted)
    assert got.dtype == np.float32 and got.shape == want.shape == one.shape
    np.testing.assert_array_equal(got, want)  # NaN where NaN
    np.testing.assert_array_equal(got, one)
    struct = pa.chunked_array([pa.StructArray.from_arrays([c, c], ["a", "b"]) for c in chunks])
    got = tensors.to_numpy(struct)
    assert list(got) == ["a", "b"]
    np.testing.assert_array_equal(got["b"], want)
    ints = tensors.tensor_type(np.int64, (64,), layout=layout)
    with pytest.raises(ValueError, match="null row"):  # ints with nulls and no fill: refused, as before
        tensors.to_numpy(pa.chunked_array([
            tensors.to_arrow(np.zeros((40_000, 64), np.int64), ints),
            tensors.with_null_rows(tensors.to_arrow(np.zeros((2, 64), np.int64), ints),
                                   np.array([True, False]))]))


def test_null_rows_of_a_struct_reach_binary_and_nested_children():
    # a dict observation whose last row is null (LeRobot's final step), with a binary-layout camera
    # and a nested struct: pyarrow's if_else has no kernel for the extension type
    from rlarrow.core.tensors import tensor_type, to_arrow, to_numpy, with_null_rows

    camera = np.arange(3 * 8 * 8 * 3, dtype=np.uint8).reshape(3, 8, 8, 3)
    value = {"state": np.arange(6, dtype=np.float32).reshape(3, 2), "images": {"top": camera}}
    type_ = pa.struct([("state", tensor_type(np.float32, (2,))),
                       ("images", pa.struct([("top", tensor_type(np.uint8, (8, 8, 3), layout="binary"))]))])
    arr = with_null_rows(to_arrow(value, type_), np.array([False, False, True]))
    out = to_numpy(arr, fill_value=0)
    assert np.array_equal(out["images"]["top"][:2], camera[:2]) and not out["images"]["top"][2].any()
    assert np.array_equal(out["state"][:2], value["state"][:2]) and not out["state"][2].any()


def test_null_rows_of_a_sliced_struct_keep_the_slice():
    # a row group's slice of a struct column (what the loaders read): the fields' buffers start
    # before the slice, which the null handling must not forget
    from rlarrow.core.tensors import tensor_type, to_arrow, to_numpy

    flat = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(12, dtype=np.float32)), 2)
    camera = to_arrow(np.arange(24, dtype=np.uint8).reshape(6, 2, 2),
                      tensor_type(np.uint8, (2, 2), layout="binary"))
    arr = pa.StructArray.from_arrays([flat, pa.array(np.arange(6)), camera], names=["a", "b", "img"],
                                     mask=pa.array([False] * 5 + [True]))
    out = to_numpy(pa.table({"obs": arr}).slice(2, 4).column("obs"), fill_value=0)
    assert out["a"].tolist() == [[4, 5], [6, 7], [8, 9], [0, 0]] and out["b"].tolist() == [2, 3, 4, 0]
    assert out["img"].reshape(4, -1).tolist() == [[8, 9, 10, 11], [12, 13, 14, 15], [16, 17, 18, 19], [0] * 4]


def test_a_declared_table_of_binary_tensors_in_a_dict_reads_empty_with_its_types(tmp_path):
    """No file yet: the empty table keeps extension types nested in a struct (pyarrow's own refuses)."""
    from rlarrow.core.tensors import empty_table

    obs = pa.struct([("image", rlarrow.core.tensors.tensor_type("uint8", (4, 4), layout="binary")),
                     ("state", rlarrow.core.tensors.tensor_type("float32", (3,)))])
    store = rlarrow.Store.create(tmp_path / "s")
    store.declare("steps", {"observation": obs})
    got = store.read("steps")
    assert got.num_rows == 0 and got.schema.field("observation").type == obs
    assert empty_table(got.schema).schema.equals(got.schema)
    assert len(empty_table(pa.schema([("x", pa.large_list(pa.list_(pa.int8(), 2)))]))) == 0


def test_a_polars_frame_of_image_steps_goes_back_to_arrow_numpy_pandas_and_a_store(tmp_path):
    """Polars keeps binary-layout tensors as plain binary: its ``to_arrow()`` failed with rlarrow imported.

    ("Expected 2 buffers for imported type extension<rlarrow.tensor>": rlarrow's type was
    made for the bytes Polars handed back as variable-size binary.) Now the column arrives as
    a ``TensorBytesType`` that every rlarrow path takes as the tensor it stands for.
    """
    import polars as pl

    from rlarrow.core.errors import ArgumentTypeError
    from rlarrow.core.tensors import TensorBytesType, TensorType, to_numpy

    frames = np.random.default_rng(0).integers(0, 256, (5, 6, 7, 3), dtype=np.uint8)
    frames_type = TensorType(np.uint8, (6, 7, 3))
    obs = pa.ExtensionArray.from_storage(frames_type, pa.array([f.tobytes() for f in frames], pa.binary(126)))
    with rlarrow.Store.create(tmp_path / "s") as st:
        st.append("steps", {"run_id": "r", "episode_id": 0, "step": np.arange(5), "env_index": 0,
                            "observation": obs, "action": [0, 1, 2, 1, None], "reward": [1.0] * 4 + [None],
                            "discount": [1.0] * 4 + [None], "is_first": [True] + [False] * 4,
                            "is_last": [False] * 4 + [True], "is_terminal": False})
    frame = rlarrow.scan(tmp_path / "s", "steps").collect()
    table = frame.to_arrow()
    column = table.column("observation")
    assert isinstance(column.type, TensorBytesType) and column.type.fixed() == frames_type
    assert np.array_equal(to_numpy(column), frames)
    assert frame.to_pandas()["observation"].map(len).tolist() == [126] * 5
    # back into a store, as the tensors they are
    with rlarrow.Store.create(tmp_path / "copy") as copy:
        copy.append("steps", table)
        back = copy.read("steps")
    assert back.schema.field("observation").type == frames_type
    assert np.array_equal(to_numpy(back.column("observation")), frames)
    # a value of another length is refused, saying so
    wrong = pa.ExtensionArray.from_storage(TensorBytesType(np.uint8, (6, 7, 3), pa.binary()),
                                           pa.array([b"\x00" * 125], pa.binary()))
    with pytest.raises(ArgumentTypeError, match="another length"):
        to_numpy(wrong)
    assert pl.from_arrow(table).height == 5
