"""The data model: tables, columns, types and versions, loaded from ``schemas/``.

The JSON files in ``schemas/`` (one per table and major version, e.g.
``schemas/steps.v1.json``) are the single source of truth; this module is the only
place in rlarrow that turns them into Arrow schemas. ``docs/format.md`` explains them.

Column types in the schema files:

* ``string``, ``bool``, ``int32``, ``int64``, ``float64``, ``timestamp[us, UTC]``: as in Arrow;
* ``json``: UTF-8 text holding JSON (see :mod:`rlarrow.core.metadata`);
* ``tensor``: a tensor column (see :mod:`rlarrow.core.tensors`) whose concrete type is fixed
  per layout of the table by its first commit or by :meth:`rlarrow.Store.declare` (data
  with other tensor types starts another layout: :meth:`rlarrow.Store.layouts`).

Example:
    >>> from rlarrow.core import schema
    >>> steps = schema.table("steps")
    >>> steps.version
    (1, 1)
    >>> steps.column("reward").arrow_type
    DataType(double)
    >>> [c.name for c in steps.columns][:4]
    ['run_id', 'episode_id', 'step', 'env_index']
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow._version import __version__
from rlarrow.core import metadata as _metadata
from rlarrow.core import tensors as _tensors
from rlarrow.core.errors import (
    ArgumentError,
    CorruptFileError,
    NotFoundError,
    SchemaMismatchError,
    UnsupportedInputError,
)

# re-exported: their home is rlarrow.core.type_names, which rlarrow.core.errors uses too
from rlarrow.core.type_names import column_differences as column_differences
from rlarrow.core.type_names import describe_type as describe_type
from rlarrow.core.type_names import schema_differences

__all__ = ["FORMAT_VERSION", "TABLE_NAMES", "TableSchema", "format_version", "read_file", "table"]

#: Version of the store layout (directory structure and manifest).
FORMAT_VERSION: tuple[int, int] = (1, 4)

#: Parquet key-value metadata keys every rlarrow file carries.
KEY_TABLE = "rlarrow.table"
KEY_SCHEMA_VERSION = "rlarrow.schema_version"
KEY_FORMAT_VERSION = "rlarrow.format_version"
KEY_WRITER = "rlarrow.writer"

_SIMPLE_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "bool": pa.bool_(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "timestamp[us, UTC]": pa.timestamp("us", tz="UTC"),
    "json": pa.string(),
    "list<int64>": pa.list_(pa.int64()),
    "list<float64>": pa.list_(pa.float64()),
    "list<binary>": pa.list_(pa.binary()),
    "large_binary": pa.large_binary(),
}


def parse_version(text: str) -> tuple[int, int]:
    """Parse ``"MAJOR.MINOR"`` into a tuple.

    >>> parse_version("1.0")
    (1, 0)
    """
    try:
        major, _, minor = str(text).partition(".")
        return int(major), int(minor or 0)
    except ValueError:
        raise ArgumentError(f"not a MAJOR.MINOR version: {text!r}") from None


def format_version(version: tuple[int, int]) -> str:
    """Format a version tuple as ``"MAJOR.MINOR"``."""
    return f"{version[0]}.{version[1]}"


@dataclass(frozen=True)
class ColumnSpec:
    """One column of a table, as its schema file declares it."""

    name: str
    type: str
    nullable: bool
    description: str
    types_of: str | None = None
    enum: tuple[str, ...] | None = None

    @property
    def is_tensor(self) -> bool:
        """Whether the column holds tensors (its concrete type is set per store)."""
        return self.type == "tensor"

    @property
    def is_json(self) -> bool:
        """Whether the column holds JSON text."""
        return self.type == "json"

    @property
    def arrow_type(self) -> pa.DataType | None:
        """The Arrow type, or None for a tensor column."""
        return None if self.is_tensor else _SIMPLE_TYPES[self.type]


@dataclass(frozen=True)
class TableSchema:
    """A table of the data model at one schema version."""

    name: str
    version: tuple[int, int]
    description: str
    columns: tuple[ColumnSpec, ...]
    key: tuple[str, ...]
    tensor_columns_allowed: bool = False
    source: str = ""
    _by_name: dict[str, ColumnSpec] = field(default_factory=dict, repr=False, compare=False)

    def column(self, name: str) -> ColumnSpec:
        """The column called ``name`` (KeyError if the table has none)."""
        if not self._by_name:
            self._by_name.update({c.name: c for c in self.columns})
        return self._by_name[name]

    @property
    def column_names(self) -> list[str]:
        """Names of the declared columns, in order."""
        return [c.name for c in self.columns]

    @property
    def json_pairs(self) -> dict[str, str]:
        """JSON value column -> its type-tag column."""
        return {c.types_of: c.name for c in self.columns if c.types_of}

    def file_metadata(self) -> dict[bytes, bytes]:
        """Key-value metadata every Parquet file of this table carries."""
        return {
            KEY_TABLE.encode(): self.name.encode(),
            KEY_SCHEMA_VERSION.encode(): format_version(self.version).encode(),
            KEY_FORMAT_VERSION.encode(): format_version(FORMAT_VERSION).encode(),
            KEY_WRITER.encode(): f"rlarrow {__version__}".encode(),
        }

    def arrow_schema(self, tensor_types: Mapping[str, pa.DataType] | None = None) -> pa.Schema:
        """The Arrow schema with concrete types for the given tensor columns.

        Tensor columns without a type in ``tensor_types`` are left out. Extra tensor
        columns (memory table) follow the declared columns in ``tensor_types`` order.
        """
        tensor_types = dict(tensor_types or {})
        fields = []
        for col in self.columns:
            if col.is_tensor:
                if col.name in tensor_types:
                    fields.append(pa.field(col.name, tensor_types.pop(col.name), nullable=True))
            else:
                assert col.arrow_type is not None
                fields.append(pa.field(col.name, col.arrow_type, nullable=col.nullable))
        if tensor_types and not self.tensor_columns_allowed:
            raise NotFoundError(f"table {self.name!r} has no tensor columns {sorted(tensor_types)}")
        for name, type_ in tensor_types.items():
            fields.append(pa.field(name, type_, nullable=True))
        return pa.schema(fields, metadata=self.file_metadata())

    def describe(self) -> str:
        """Human-readable summary of the columns (used in error messages)."""
        lines = []
        for c in self.columns:
            null = "" if c.nullable else " not null"
            lines.append(f"{c.name}: {c.type}{null}")
        if self.tensor_columns_allowed:
            lines.append("<any other name>: tensor")
        return "\n".join(lines)


def schemas_dir() -> Path:
    """Directory holding the schema files (installed copy, else the source tree's)."""
    try:
        packaged = resources.files("rlarrow") / "_schemas"
        if packaged.is_dir():
            return Path(str(packaged))
    except (ModuleNotFoundError, NotADirectoryError):  # pragma: no cover
        pass
    here = Path(__file__).resolve().parents[2] / "schemas"
    if here.is_dir():
        return here
    raise FileNotFoundError(  # pragma: no cover - a broken install
        "rlarrow's schema files are missing (expected rlarrow/_schemas or schemas/); reinstall rlarrow"
    )


def _load_schema_file(path: Path) -> TableSchema:
    spec = json.loads(path.read_text(encoding="utf-8"))
    columns = tuple(
        ColumnSpec(
            name=c["name"],
            type=c["type"],
            nullable=bool(c["nullable"]),
            description=c.get("description", ""),
            types_of=c.get("types_of"),
            enum=tuple(c["enum"]) if "enum" in c else None,
        )
        for c in spec["columns"]
    )
    for c in columns:
        if c.type != "tensor" and c.type not in _SIMPLE_TYPES:
            raise ArgumentError(f"{path}: column {c.name!r} has unknown type {c.type!r}")
    return TableSchema(
        name=spec["table"],
        version=parse_version(spec["version"]),
        description=spec.get("description", ""),
        columns=columns,
        key=tuple(spec.get("key", ())),
        tensor_columns_allowed=bool(spec.get("tensor_columns", {}).get("allowed", False)),
        source=path.name,
    )


def _load_all() -> dict[str, TableSchema]:
    found: dict[str, TableSchema] = {}
    for path in sorted(schemas_dir().glob("*.v*.json")):
        schema = _load_schema_file(path)
        current = found.get(schema.name)
        if current is None or schema.version > current.version:
            found[schema.name] = schema
    return found


_TABLES = _load_all()

#: Names of the tables of a store, in dependency order.
TABLE_NAMES: tuple[str, ...] = tuple(
    n for n in ("runs", "episodes", "steps", "scalars", "memory", "sources", "stats", "videos")
    if n in _TABLES
)


def table(name: str) -> TableSchema:
    """The current schema of table ``name``.

    Raises:
        KeyError: no such table (the message lists the tables).
    """
    given: object = name  # (any object reaches here from a caller's mistake)
    if not isinstance(given, str):
        from rlarrow.core.errors import ArgumentTypeError

        raise ArgumentTypeError(f"table: give a table's name ({', '.join(TABLE_NAMES)}), "
                                f"not {type(given).__name__} {given!r:.60}")
    try:
        return _TABLES[name]
    except KeyError:
        raise NotFoundError(f"unknown table {name!r}; tables are: {', '.join(TABLE_NAMES)}") from None


# --------------------------------------------------------------------------------------
# Building and validating data


def build(
    table_name: str,
    columns: Mapping[str, Any],
    *,
    num_rows: int | None = None,
    established: pa.Schema | None = None,
) -> pa.Table:
    """Build a table from Python/NumPy columns.

    * tensor columns take NumPy arrays ``(rows, *shape)``, dicts of them, or sequences
      of per-row arrays (see :func:`rlarrow.core.tensors.to_arrow`);
    * a JSON column (``metadata``, ``env_specs``) takes one Python value per row and
      fills its ``*_types`` column too (pass Arrow arrays to give encoded text instead);
    * a scalar (str, int, float, bool) is repeated over all rows;
    * missing nullable columns become nulls.

    The result is checked with :func:`conform` (against ``established``, the store's
    concrete schema, when given). ``established`` is a layout of the table: tensors are
    built in its types where they can be; tensor columns it cannot hold (another dtype,
    shape or set of tensors) leave it out, and the data is checked on its own (the store
    then writes it to another layout of the table).

    Example:
        >>> import numpy as np
        >>> t = build("steps", {
        ...     "run_id": "demo", "episode_id": 0, "step": np.arange(3), "env_index": 0,
        ...     "observation": np.zeros((3, 2), np.float32), "reward": [1.0, 0.5, None],
        ...     "is_first": [True, False, False], "is_last": [False, False, True],
        ...     "is_terminal": [False, False, True],
        ... })
        >>> t.num_rows, t.schema.field("observation").type
        (3, FixedSizeListType(fixed_size_list<item: float>[2]))
    """
    schema = table(table_name)
    if num_rows is None:
        for value in columns.values():
            if isinstance(value, Mapping):
                value = next(iter(value.values()))
            if isinstance(value, (str, bytes, int, float, bool, np.generic)) or value is None:
                continue
            num_rows = len(value)
            break
        else:
            num_rows = 1
    arrays: dict[str, pa.Array] = {}
    for name, value in columns.items():
        try:
            spec: ColumnSpec | None = schema.column(name)
        except KeyError:
            spec = None
        if spec is not None and spec.types_of and name in arrays:
            continue  # filled together with its JSON column
        if isinstance(value, (pa.Array, pa.ChunkedArray)):
            arrays[name] = value.combine_chunks() if isinstance(value, pa.ChunkedArray) else value
            continue
        if spec is None or spec.is_tensor:
            if spec is None and not schema.tensor_columns_allowed:
                arrays[name] = pa.array(value)  # conform() reports it
                continue
            if isinstance(value, (int, float, bool, np.generic)):
                value = np.full(num_rows, value)
            want = None
            if established is not None and name in established.names:
                want = established.field(name).type
            try:
                arrays[name] = _tensors.to_arrow(value, want)  # in the store's layout
            except (TypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
                arrays[name] = _tensors.to_arrow(value)  # conform() says what does not fit
            continue
        if spec.is_json:
            types_col = schema.json_pairs.get(name)
            if value is None:
                arrays[name] = pa.nulls(num_rows, pa.string())
                if types_col:
                    arrays[types_col] = pa.nulls(num_rows, pa.string())
                continue
            if isinstance(value, (str, int, float, bool, dict)):
                value = [value] * num_rows
            texts, types = _metadata.encode_column(value)
            arrays[name] = pa.array(texts, pa.string())
            if types_col:
                arrays[types_col] = pa.array(types, pa.string())
            continue
        arrow_type = spec.arrow_type
        if value is None:
            arrays[name] = pa.nulls(num_rows, arrow_type)
        elif isinstance(value, (str, int, float, bool, np.generic)):
            try:
                arrays[name] = pa.repeat(pa.scalar(value, type=arrow_type), num_rows)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
                arrays[name] = pa.repeat(pa.scalar(value), num_rows)  # conform() casts it or says why not
        else:
            try:
                arrays[name] = pa.array(value, type=arrow_type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError):
                arrays[name] = pa.array(value)  # conform() casts it or says why not
    if established is not None and not _tensors_fit(schema, arrays, established):
        # other tensors than the established layout's: the store puts them in (or starts)
        # another layout of the table, so they are checked on their own here
        established = None
    return conform(table_name, pa.table(arrays), established)


def _tensors_fit(spec: TableSchema, arrays: Mapping[str, pa.Array], established: pa.Schema) -> bool:
    """Whether the tensor columns built can be stored in ``established``'s types (as conform() converts)."""
    declared = {c.name for c in spec.columns if not c.is_tensor}
    for name, arr in arrays.items():
        if name in declared:
            continue
        if name not in established.names:
            return False
        type_, want = arr.type, established.field(name).type
        if type_ == want or pa.types.is_null(type_):
            continue
        if pa.types.is_struct(type_) or pa.types.is_struct(want):
            return False
        try:
            if (_tensors.tensor_shape(type_) != _tensors.tensor_shape(want)
                    or _tensors.tensor_dtype(type_) != _tensors.tensor_dtype(want)):
                return False
        except (TypeError, ValueError):
            return False
    return True


def _cast_problem(name: str, got: pa.DataType, want: pa.DataType) -> str:
    return f"column {name!r}: expected {want}, got {got}"


def conform(
    table_name: str,
    data: pa.Table | pa.RecordBatch,
    established: pa.Schema | None = None,
) -> pa.Table:
    """Check ``data`` against a table's schema; return it in the schema's exact form.

    Columns are put in schema order, missing nullable columns are added as nulls,
    lossless casts are made (int32 -> int64, float32 -> float64, large_string ->
    string, dictionary -> plain), and tensor columns are checked against
    ``established`` (the store's concrete schema) when given.

    Raises:
        SchemaMismatchError: listing every problem found, with both schemas.
    """
    schema = table(table_name)
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    run = _Conforming(table_name, schema, data, established)
    run.check_duplicates()
    for spec in schema.columns:
        if spec.name not in run.names:
            run.missing(spec)
        elif spec.is_tensor:
            run.tensor(spec.name, data.column(spec.name))
        else:
            run.declared(spec, data.column(spec.name))
    run.extra_tensors()
    return run.result()


class _Conforming:
    """One :func:`conform` call: the columns it gives, in order, and every problem found."""

    def __init__(self, table_name: str, schema: TableSchema, data: pa.Table,
                 established: pa.Schema | None) -> None:
        self.table_name = table_name
        self.schema = schema
        self.data = data
        self.established = established
        self.established_types = {} if established is None else {f.name: f.type for f in established}
        self.n = data.num_rows
        self.names = data.column_names
        self.problems: list[str] = []
        self.fields: list[pa.Field] = []
        self.columns: list[pa.ChunkedArray | pa.Array] = []

    def add(self, name: str, column: pa.ChunkedArray | pa.Array, type_: pa.DataType,
            nullable: bool = True) -> None:
        self.fields.append(pa.field(name, type_, nullable=nullable))
        self.columns.append(column)

    def check_duplicates(self) -> None:
        names = self.names
        if len(set(names)) != len(names):
            dupes = sorted({x for x in names if names.count(x) > 1})
            self.problems.append(f"duplicate column name(s): {dupes}")

    def missing(self, spec: ColumnSpec) -> None:
        """A declared column the data lacks: nulls of its type, or a problem when required."""
        if spec.is_tensor:
            want = self.established_types.get(spec.name)
            if want is not None:
                self.add(spec.name, pa.nulls(self.n, want), want)
            return
        if not spec.nullable:
            self.problems.append(f"missing required column {spec.name!r} ({spec.type})")
            return
        assert spec.arrow_type is not None
        self.add(spec.name, pa.nulls(self.n, spec.arrow_type), spec.arrow_type)

    def tensor(self, name: str, col: pa.ChunkedArray) -> None:
        """A tensor column, checked (and kept) when it fits."""
        checked = self.checked_tensor(name, col)
        if checked is not None:
            self.add(name, checked, checked.type)

    def checked_tensor(self, name: str, col: pa.ChunkedArray) -> pa.ChunkedArray | None:
        type_ = col.type
        if isinstance(type_, pa.ExtensionType):
            col = pa.chunked_array([_tensors.to_arrow(c) for c in col.chunks]) if col.num_chunks else col
            type_ = col.type
        want = self.established_types.get(name)
        if want is not None:
            return self.as_established(name, col, want)
        if pa.types.is_null(type_):
            self.problems.append(
                f"tensor column {name!r} is all null and its type is not known yet; declare it "
                f"first with Store.declare({self.table_name!r}, {{{name!r}: <arrow type>}})"
            )
            return None
        self.problems.extend(_tensors.tensor_problems(type_, name))
        return col

    def as_established(self, name: str, col: pa.ChunkedArray, want: pa.DataType) -> pa.ChunkedArray | None:
        """A tensor column in the type the store holds for it, or None (a problem noted)."""
        type_ = col.type
        if type_ == want:
            return col
        if pa.types.is_null(type_):
            return pa.chunked_array([pa.nulls(self.n, want)])
        if (isinstance(want, _tensors.TensorType) or isinstance(type_, _tensors.TensorType)) and (
                not pa.types.is_struct(type_) and not pa.types.is_struct(want)
                and _tensors.tensor_shape(type_) == _tensors.tensor_shape(want)
                and _tensors.tensor_dtype(type_) == _tensors.tensor_dtype(want)):
            # the same tensors in the other layout (nested lists <-> binary): convert
            return pa.chunked_array([_tensors.to_arrow(c, want) for c in col.chunks], type=want)
        self.problems.append(
            f"tensor column {name!r}: the store holds {describe_type(want)}, got "
            f"{describe_type(type_)} (a layout of a table keeps one dtype and shape per tensor "
            "column: convert the data, or write it under a new run id, which starts another layout)"
        )
        return None

    def declared(self, spec: ColumnSpec, col: pa.ChunkedArray) -> None:
        """A declared (non-tensor) column: cast losslessly to its type, its values checked."""
        want_type = spec.arrow_type
        assert want_type is not None
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        if col.type != want_type:
            cast = self.cast(spec.name, col, want_type)
            if cast is None:
                return
            col = cast
        self.check_values(spec, col)
        self.add(spec.name, col, want_type, spec.nullable)

    def cast(self, name: str, col: pa.ChunkedArray, want_type: pa.DataType) -> pa.ChunkedArray | None:
        if pa.types.is_null(col.type):
            return pa.chunked_array([pa.nulls(self.n, want_type)])
        if not _castable(col.type, want_type):
            self.problems.append(_cast_problem(name, col.type, want_type))
            return None
        try:
            return col.cast(want_type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            self.problems.append(f"column {name!r}: cannot convert {col.type} to {want_type} "
                                 f"without loss ({exc})")
            return None

    def check_values(self, spec: ColumnSpec, col: pa.ChunkedArray) -> None:
        if not spec.nullable and col.null_count:
            first = pc.index(pc.is_null(col), True).as_py()
            self.problems.append(f"column {spec.name!r} must not be null, but has {col.null_count} "
                                 f"null(s) (first at row {first})")
        if spec.enum is not None and self.n:
            present = {v for v in pc.unique(col).to_pylist() if v is not None}
            bad = sorted(present - set(spec.enum))
            if bad:
                self.problems.append(f"column {spec.name!r}: value(s) {bad} not allowed; allowed: "
                                     f"{list(spec.enum)}")

    def extra_tensors(self) -> None:
        """Columns the schema does not declare: tensors where the table allows them."""
        schema, established = self.schema, self.established
        declared = set(schema.column_names)
        extras = [c for c in self.names if c not in declared]
        if extras and not schema.tensor_columns_allowed:
            self.problems.append(f"unknown column(s) {extras}; table {self.table_name!r} has: "
                                 f"{schema.column_names}")
            return
        if not schema.tensor_columns_allowed:
            return
        known_extras = [f for f in self.established_types if f not in declared]
        if established is not None:
            new = [c for c in extras if c not in self.established_types]
            if new:
                self.problems.append(
                    f"tensor column(s) {new} are not in the store's {self.table_name!r} table, which "
                    f"has {known_extras} (a layout keeps one set of tensors: write other tensors "
                    "under a new run id, which starts another layout of the table)"
                )
        for name in known_extras if established is not None else extras:
            if name in self.names:
                self.tensor(name, self.data.column(name))
            else:
                want = self.established_types[name]
                self.add(name, pa.nulls(self.n, want), want)

    def result(self) -> pa.Table:
        if self.problems:
            expected: object = self.established if self.established is not None else self.schema.describe()
            raise SchemaMismatchError(self.table_name, self.problems, expected=expected, got=self.data.schema,
                                      differences=schema_differences(expected, self.data.schema))
        return pa.Table.from_arrays(
            [c if isinstance(c, pa.ChunkedArray) else pa.chunked_array([c], type=f.type)
             for c, f in zip(self.columns, self.fields, strict=True)],
            schema=pa.schema(self.fields, metadata=self.schema.file_metadata()),
        )


def quick_check(table_name: str, data: pa.Table) -> None:
    """Check the values of data whose schema is already exactly the table's.

    The cheap subset of :func:`conform` for a writer's hot path: non-null columns hold
    no nulls and enumerated columns hold allowed values.

    Raises:
        SchemaMismatchError: listing every problem found.
    """
    spec = table(table_name)
    problems = []
    for i, name in enumerate(data.schema.names):
        try:
            col = spec.column(name)
        except KeyError:
            continue  # a tensor column of the memory table
        if col.nullable and col.enum is None:
            continue
        column = data.column(i)
        if not col.nullable and column.null_count:
            problems.append(f"column {name!r} must not be null, but has {column.null_count} null(s)")
        if col.enum is not None and data.num_rows:
            bad = sorted({v for v in pc.unique(column).to_pylist() if v is not None} - set(col.enum))
            if bad:
                problems.append(f"column {name!r}: value(s) {bad} not allowed; allowed: {list(col.enum)}")
    if problems:
        raise SchemaMismatchError(table_name, problems)


def _castable(got: pa.DataType, want: pa.DataType) -> bool:
    """Casts conform() makes (checked for loss by pyarrow's safe cast)."""
    if pa.types.is_integer(want):
        return bool(pa.types.is_integer(got))
    if pa.types.is_floating(want):
        return bool(pa.types.is_floating(got) or pa.types.is_integer(got))
    if pa.types.is_string(want):
        return bool(pa.types.is_large_string(got) or pa.types.is_string_view(got))
    if pa.types.is_timestamp(want):
        return bool(pa.types.is_timestamp(got))  # naive timestamps are taken as UTC
    return False


# --------------------------------------------------------------------------------------
# Files


@dataclass(frozen=True)
class FileInfo:
    """What an rlarrow Parquet file says about itself."""

    path: str
    table: str
    schema_version: tuple[int, int]
    format_version: tuple[int, int] | None
    writer: str | None
    num_rows: int
    schema: pa.Schema


def read_file_info(path: str | os.PathLike[str]) -> FileInfo:
    """Read the footer of an rlarrow Parquet file.

    Raises:
        CorruptFileError: the file is truncated or not Parquet.
        UnsupportedInputError: a Parquet file without rlarrow's table metadata.
    """
    import pyarrow.parquet as pq

    path = os.fspath(path)
    try:
        meta = pq.read_metadata(path)
        arrow_schema = pq.read_schema(path)
    except FileNotFoundError:
        raise
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        raise CorruptFileError(path, f"not a readable Parquet file ({exc})") from exc
    kv = meta.metadata or {}
    table_name = kv.get(KEY_TABLE.encode())
    version = kv.get(KEY_SCHEMA_VERSION.encode())
    if table_name is None or version is None:
        raise UnsupportedInputError(
            path,
            f"a Parquet file without rlarrow's {KEY_TABLE!r}/{KEY_SCHEMA_VERSION!r} metadata; "
            "it was not written by rlarrow",
        )
    fmt = kv.get(KEY_FORMAT_VERSION.encode())
    writer = kv.get(KEY_WRITER.encode())
    try:
        schema_version = parse_version(version.decode())
        fmt_version = parse_version(fmt.decode()) if fmt else None
    except ValueError as exc:
        raise CorruptFileError(path, f"bad rlarrow version metadata: {exc}") from exc
    return FileInfo(
        path=path,
        table=table_name.decode(),
        schema_version=schema_version,
        format_version=fmt_version,
        writer=writer.decode() if writer else None,
        num_rows=meta.num_rows,
        schema=arrow_schema,
    )


def check_version(
    where: str, what: str, got: tuple[int, int], want: tuple[int, int], *, store: str
) -> None:
    """Compare a written version with the one this rlarrow reads.

    Raises:
        FormatVersionError: an older major version (naming ``rlarrow migrate STORE``) or a
            newer one (asking to upgrade rlarrow).

    Warns:
        FormatVersionWarning: a newer minor version.
    """
    import warnings

    from rlarrow.core.errors import FormatVersionError, FormatVersionWarning

    if got[0] < want[0]:
        raise FormatVersionError(
            f"{where}: {what} was written by an older rlarrow (this rlarrow {__version__} reads "
            f"{format_version(want)}); upgrade the store in place with: rlarrow migrate {store}"
        )
    if got[0] > want[0]:
        raise FormatVersionError(
            f"{where}: {what} is newer than this rlarrow {__version__} understands "
            f"({format_version(want)}); upgrade with: pip install -U rlarrow"
        )
    if got[1] > want[1]:
        warnings.warn(
            f"{where}: {what} is a newer minor version than this rlarrow {__version__} knows "
            f"({format_version(want)}); columns it added are kept but not interpreted. "
            "Upgrade with: pip install -U rlarrow",
            FormatVersionWarning,
            stacklevel=4,
        )


def check_file_version(info: FileInfo, *, store: str | os.PathLike[str] | None = None) -> None:
    """Check a file's schema version against this rlarrow's (see :func:`check_version`)."""
    try:
        want = table(info.table).version
    except KeyError:
        raise UnsupportedInputError(
            info.path, f"holds table {info.table!r}, which this rlarrow {__version__} does not know; "
            "upgrade with: pip install -U rlarrow") from None
    check_version(info.path, f"table {info.table!r} schema {format_version(info.schema_version)}",
                  info.schema_version, want, store=os.fspath(store) if store is not None else "STORE")


def read_file(path: str | os.PathLike[str], columns: list[str] | None = None) -> pa.Table:
    """Read one rlarrow Parquet file, checking what it says about itself.

    Example:
        >>> import rlarrow, tempfile, os
        >>> s = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
        >>> _ = s.append("scalars", {"run_id": "r", "scope": "train", "tag": "x",
        ...                          "step": [1], "value": [2.0]})
        >>> read_file(s.files("scalars")[0]).column("value").to_pylist()
        [2.0]

    Raises:
        CorruptFileError: truncated or not Parquet.
        UnsupportedInputError: not written by rlarrow, or a table this rlarrow does not know.
        FormatVersionError: an older major version (run ``rlarrow migrate``) or a newer one.
    """
    import pyarrow.parquet as pq

    info = read_file_info(path)
    check_file_version(info)
    try:
        return pq.read_table(os.fspath(path), columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptFileError(os.fspath(path), f"damaged Parquet data ({exc})") from exc
