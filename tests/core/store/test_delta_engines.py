"""Other engines read a store's tables through their Delta logs: the rows rlarrow reads, at each version.

deltalake (delta-rs, the reference), Daft and Polars read a store written by rlarrow, on the local
disk and the same store pushed to the tests' S3 server (``s3`` fixture, moto), at each Delta version,
and every value is compared with ``Store.open(path, version=S).read(table)`` of the same store
version. A declared table with no row yet is a Delta table too (0 rows, its columns). Ray Data's
``read_delta`` is in ``tests/train/test_ray.py`` (it needs the module's Ray cluster).

Polars is read two ways: ``pl.read_delta`` (with ``use_pyarrow=True`` for tensor tables: its own
Delta reader refuses them, see the xfail below and docs/format.md), and Polars' own Parquet reader
on the files of the Delta snapshot (``deltalake.DeltaTable(uri, version=v).file_uris()``), which
reads both tensor layouts without pyarrow (docs/scale.md shows it).

The engines' types are Delta's (a list-layout tensor a variable-size list, ``uint8`` a wider
integer): the values are compared, row by row, NaN where NaN.
"""

from __future__ import annotations

import importlib.util
import math
import os
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from conftest import episode_columns

import rlarrow
from rlarrow.core.tensors import tensor_type, to_arrow

deltalake = pytest.importorskip("deltalake", reason="needs deltalake (the dev extra) to read the logs")

STEP_KEYS = ["run_id", "episode_id", "step"]
TYPES = {"observation": pa.struct([("position", tensor_type("float32", (3,))),
                                   ("grid", tensor_type("uint8", (4, 5)))]),
         "action": tensor_type("int64", (2,))}
#: the same tensors in the binary layout (Delta ``binary``): a layout of steps of its own
BINARY = {"observation": pa.struct([("position", tensor_type("float32", (3,), layout="binary")),
                                    ("grid", tensor_type("uint8", (4, 5), layout="binary"))]),
          "action": tensor_type("int64", (2,), layout="binary")}


def _scalars(start: int, values: list[float]) -> dict[str, Any]:
    return {"run_id": "r", "scope": "train", "tag": "loss", "step": np.arange(start, start + len(values)),
            "value": np.array(values)}


@pytest.fixture
def store(tmp_path):
    """Steps declared first (an empty Delta table), then two appends; scalars with NaN, -0.0 and 2**62."""
    st = rlarrow.Store.create(tmp_path / "s.rlarrow", auto_compact=None)
    st.declare("steps", TYPES)
    st.append("steps", episode_columns("r", 0, 3))
    st.append("steps", episode_columns("r", 1, 5))
    st.declare("steps", BINARY, new_layout=True)
    binary = episode_columns("b", 0, 4)
    st.append("steps", {**binary, **{k: to_arrow(binary[k], t) for k, t in BINARY.items()}})
    st.append("scalars", _scalars(0, [1.0, math.nan]))
    st.append("scalars", _scalars(2**62, [-0.0, 0.25]))
    return st


def _canon(value: Any) -> Any:
    """A value as plain Python, NaN made comparable (NaN != NaN) and -0.0 told apart from 0.0."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else (value, math.copysign(1.0, value))
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canon(v) for v in value]
    return value


def _rows(table: pa.Table | pl.DataFrame, keys: list[str]) -> list[dict[str, Any]]:
    """The table's rows in key order, plain Python (binary-layout tensors as their bytes).

    A Polars frame is taken as Python values as it is: Polars holds a binary-layout column as
    ``Extension('rlarrow.tensor', Binary)``, which it exports to pyarrow over ``large_binary``,
    storage the registered ``rlarrow.tensor`` type cannot take (its storage is fixed-size).
    """
    if isinstance(table, pl.DataFrame):
        rows = table.to_dicts()
    else:
        columns = {name: [v for chunk in column.chunks for v in _plain(chunk).to_pylist()]
                   for name, column in zip(table.column_names, table.columns, strict=True)}
        rows = [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]
    return sorted((_canon(r) for r in rows), key=lambda r: tuple(r[k] for k in keys))


def _plain(array: pa.Array) -> pa.Array:
    """An array without extension types (their storage) or fixed sizes (lists), strings and bytes plain."""
    if isinstance(array.type, pa.ExtensionType):
        return _plain(array.storage)
    t = array.type
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays([_plain(array.field(i)) for i in range(t.num_fields)],
                                          names=[f.name for f in t], mask=array.is_null())
    if pa.types.is_fixed_size_list(t) or pa.types.is_large_list(t) or pa.types.is_list(t):
        return pa.array(array.to_pylist(), pa.list_(_plain(array.flatten()).type))
    if pa.types.is_large_string(t):
        return array.cast(pa.string())
    if pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return array.cast(pa.binary())
    return array


def _names(got: pa.Table | pl.DataFrame) -> list[str]:
    return list(got.columns) if isinstance(got, pl.DataFrame) else got.column_names


def _expected(store: rlarrow.Store, table: str) -> dict[int, pa.Table]:
    """Each Delta version of ``table`` (a directory: ``steps``, ``steps.2``): what rlarrow reads then."""
    base, _, n = table.partition(".")
    found = {}
    for version in range(store.version + 1):
        with rlarrow.Store.open(store.path, version=version) as at:
            delta = at.delta_versions().get(table)
            if delta is not None:
                found[delta] = at.read(base, layout=int(n or 1)) if base == "steps" else at.read(base)
    return found


ENGINES = ["deltalake", "daft", "polars", "polars-parquet"]


def _polars_snapshot(uri: str, version: int, storage: dict[str, str] | None) -> pl.DataFrame:
    """Polars' own Parquet reader (no pyarrow) on the files of Delta ``version``: docs/scale.md's recipe."""
    files = deltalake.DeltaTable(uri, version=version, storage_options=storage).file_uris()
    if not files:  # (a declared table, no file yet: Polars' Delta reader gives its 0 rows)
        return pl.read_delta(uri, version=version, storage_options=storage)
    return pl.scan_parquet(files, storage_options=storage).collect()


def _engine(name: str, storage: dict[str, str] | None) -> Any:
    """An engine as ``read(uri, delta_version) -> pyarrow.Table`` (Daft: skipped where not installed)."""
    if name == "deltalake":
        return lambda uri, v: deltalake.DeltaTable(uri, version=v, storage_options=storage).to_pyarrow_table()
    if name == "polars":  # (its own Delta reader refuses tensor columns: below)
        return lambda uri, v: pl.read_delta(uri, version=v, storage_options=storage,
                                            use_pyarrow="/steps" in uri).to_arrow()
    if name == "polars-parquet":  # (a Polars frame: compared as Python values, see _rows)
        return lambda uri, v: _polars_snapshot(uri, v, storage)
    daft = pytest.importorskip("daft", reason="Daft is not installed (`make test` installs it without its "
                               "dependencies: Daft 0.7 pins pyarrow<26, see docs/scale.md)")
    io_config = None
    if storage is not None:
        io_config = daft.io.IOConfig(s3=daft.io.S3Config(
            endpoint_url=storage["AWS_ENDPOINT_URL"], key_id=storage["AWS_ACCESS_KEY_ID"],
            access_key=storage["AWS_SECRET_ACCESS_KEY"], region_name=storage["AWS_REGION"],
            use_ssl=not storage["AWS_ENDPOINT_URL"].startswith("http:")))
    return lambda uri, v: daft.read_deltalake(uri, version=v, io_config=io_config).to_arrow()


def _check_every_version(store: rlarrow.Store, root: str, storage: dict[str, str] | None,
                         engine: str) -> None:
    read = _engine(engine, storage)
    for table, keys in (("steps", STEP_KEYS), ("steps.2", STEP_KEYS), ("scalars", ["step"])):
        expected = _expected(store, table)
        assert len(expected) == (3 if table == "steps" else 2), table
        for version, want in expected.items():
            got = read(f"{root}/{table}", version)
            assert _names(got) == want.column_names, (table, version)
            assert _rows(got, keys) == _rows(want, keys), (table, version)


@pytest.mark.parametrize("engine", ENGINES)
def test_each_engine_reads_every_version_of_a_local_store_as_rlarrow_does(store, engine):
    _check_every_version(store, os.fspath(store.path), None, engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_each_engine_reads_every_version_of_the_store_pushed_to_s3(store, s3, engine):
    from rlarrow.core.remote import push

    uri = f"{s3.prefix}/engines.rlarrow"
    push(store, uri, progress=False)
    _check_every_version(store, uri, s3.storage_options, engine)


def test_a_declared_table_without_rows_is_a_delta_table_each_engine_opens(tmp_path):
    """``declare`` makes the table's Delta version 0 (CREATE TABLE): 0 rows, the declared columns."""
    st = rlarrow.Store.create(tmp_path / "s.rlarrow")
    before = st.version
    st.declare("steps", TYPES)
    assert st.version == before + 1 and st.history()[-1]["operation"] == "CREATE TABLE"
    assert st.delta_versions() == {"steps": 0}
    path = os.fspath(st.path / "steps")
    want = st.read("steps")
    assert want.num_rows == 0
    for name in ENGINES:
        if name == "daft" and importlib.util.find_spec("daft") is None:
            continue  # (Daft is optional: the tests above say so)
        got = _engine(name, None)(path, 0)
        assert len(got) == 0 and _names(got) == want.column_names, name
    native = pl.read_delta(path)  # (no file: Polars' own reader takes the log's schema)
    assert native.height == 0 and native.columns == want.column_names
    assert native.schema["action"] == pl.List(pl.Int64)
    # the version before the declare has no schema; the table's first rows are its Delta version 1
    with rlarrow.Store.open(st.path, version=before) as then:
        assert then.read("steps").num_rows == 0 and "steps" not in then.delta_versions()
    st.append("steps", episode_columns("r", 0, 2))
    assert st.delta_versions()["steps"] == 1
    assert deltalake.DeltaTable(path, version=1).to_pyarrow_table().num_rows == 3
    assert deltalake.DeltaTable(path, version=0).to_pyarrow_table().num_rows == 0


def test_a_transaction_that_fixes_a_table_is_still_one_version(tmp_path):
    """A table first written inside a transaction gets no CREATE TABLE of its own: one store version."""
    st = rlarrow.Store.create(tmp_path / "s.rlarrow")
    with st.transaction():
        st.declare("steps", TYPES)
        st.append("steps", episode_columns("r", 0, 2))
        st.append("scalars", _scalars(0, [1.0]))
    assert st.version == 1
    assert [h["operation"] for h in st.history()] == ["WRITE"]
    assert st.delta_versions()["steps"] == 0


def test_polars_native_reader_reads_tables_without_tensors(store):
    """``pl.read_delta``/``scan_delta`` without pyarrow: a table of plain columns, at each version."""
    for version, want in _expected(store, "scalars").items():
        got = pl.scan_delta(os.fspath(store.path / "scalars"), version=version).collect()
        assert _rows(got.to_arrow(), ["step"]) == _rows(want, ["step"])


@pytest.mark.parametrize("table", ["steps", "steps.2"])
@pytest.mark.xfail(strict=True, raises=pl.exceptions.SchemaError, reason="Polars' own Delta reader takes "
                   "the Delta schema's type as the target and casts no fixed-size list to a list (list "
                   "layout: 'incoming: Array(Float32, 3) != target: List(Float32)', as for a table Polars' "
                   "own write_delta writes, pola-rs/polars#27866) nor an extension type to its storage "
                   "(binary layout); read tensors with Polars' Parquet reader on the snapshot's files "
                   "(tested above), use_pyarrow=True, rlarrow.scan, deltalake or Daft (docs/format.md)")
def test_polars_native_reader_reads_tensor_columns(store, table):
    frame = pl.read_delta(os.fspath(store.path / table))
    assert frame.height == store.row_count("steps", layout=2 if table == "steps.2" else 1)


@pytest.mark.xfail(strict=True, raises=pl.exceptions.SchemaError, reason="pola-rs/polars#27866: Polars' "
                   "Delta reader refuses the fixed-size lists its own write_delta wrote (when this passes, "
                   "test_polars_native_reader_reads_tensor_columns may too: see docs/format.md)")
def test_polars_reads_back_the_array_columns_of_its_own_write_delta(tmp_path):
    """Not rlarrow's files: a table Polars writes itself fails the same way (upstream, tracked here)."""
    frame = pl.DataFrame({"a": np.arange(6, dtype=np.float32).reshape(2, 3)})
    assert frame.schema["a"] == pl.Array(pl.Float32, 3)
    frame.write_delta(tmp_path / "t")
    assert pl.read_delta(os.fspath(tmp_path / "t")).to_dicts() == frame.to_dicts()


def test_the_scale_page_daft_example_reads_the_pushed_store(s3, tmp_path, monkeypatch, capsys):
    """docs/scale.md's Daft block (a ```py block: Daft is no test dependency) on the test's S3 server."""
    import re

    from conftest import REPO

    from rlarrow.core.remote import push

    pytest.importorskip("daft", reason="Daft is not installed (not a test dependency: it pins pyarrow<26)")
    page = (REPO / "docs" / "scale.md").read_text()
    first = re.findall(r"```python\n(.*?)```", page, re.S)[0]  # (makes runs.rlarrow: 410 steps)
    daft_blocks = [b for b in re.findall(r"```py\n(.*?)```", page, re.S) if "daft.read_deltalake" in b]
    assert len(daft_blocks) == 1
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(first, "docs/scale.md", "exec"), namespace)  # noqa: S102
    push("runs.rlarrow", f"{s3.prefix}/runs.rlarrow", progress=False)
    namespace.update(steps=f"{s3.prefix}/runs.rlarrow/steps", aws=dict(s3.env),
                     version=rlarrow.Store.open("runs.rlarrow").delta_versions()["steps"])
    capsys.readouterr()
    exec(compile(daft_blocks[0], "docs/scale.md", "exec"), namespace)  # noqa: S102
    assert capsys.readouterr().out == "410\n"
