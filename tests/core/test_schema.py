"""The schema files and the schema module agree, and validation reports every problem."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pytest
from conftest import REPO

import rlarrow
from rlarrow.core import schema

SCHEMA_FILES = sorted((REPO / "schemas").glob("*.v*.json"))

TYPE_MAP = {
    "string": pa.string(), "bool": pa.bool_(), "int32": pa.int32(), "int64": pa.int64(),
    "float64": pa.float64(), "timestamp[us, UTC]": pa.timestamp("us", tz="UTC"), "json": pa.string(),
    "list<int64>": pa.list_(pa.int64()), "list<float64>": pa.list_(pa.float64()),
    "list<binary>": pa.list_(pa.binary()),
    "large_binary": pa.large_binary(),
}


def test_one_schema_file_per_table_and_major_version():
    names = {p.name for p in SCHEMA_FILES}
    tables = ("runs", "episodes", "steps", "scalars", "memory", "sources", "stats", "videos")
    assert names == {f"{t}.v1.json" for t in tables}
    assert schema.TABLE_NAMES == tables


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda p: p.name)
def test_module_matches_schema_file(path):
    spec = json.loads(path.read_text())
    table = schema.table(spec["table"])
    assert path.name == f"{table.name}.v{table.version[0]}.json"
    assert schema.format_version(table.version) == spec["version"]
    assert table.column_names == [c["name"] for c in spec["columns"]]
    assert table.key == tuple(spec["key"])
    arrow = table.arrow_schema()
    for col in spec["columns"]:
        if col["type"] == "tensor":
            assert col["name"] not in arrow.names
            continue
        field = arrow.field(col["name"])
        assert field.type == TYPE_MAP[col["type"]], col["name"]
        assert field.nullable == col["nullable"], col["name"]
    for col in spec["columns"]:
        if "types_of" in col:
            assert table.json_pairs[col["types_of"]] == col["name"]


def test_installed_schemas_are_the_repository_schemas():
    for path in SCHEMA_FILES:
        assert (schema.schemas_dir() / path.name).read_text() == path.read_text()


def test_format_doc_describes_every_column():
    doc = (REPO / "docs" / "format.md").read_text()
    for name in schema.TABLE_NAMES:
        table = schema.table(name)
        section = re.search(rf"### `{name}`(.*?)(?=\n### |\n## |\Z)", doc, re.S)
        assert section, f"docs/format.md has no section for {name}"
        for col in table.columns:
            assert f"`{col.name}`" in section.group(1), f"{name}.{col.name} undocumented"


def test_file_metadata_names_table_and_version():
    md = schema.table("steps").file_metadata()
    assert md[b"rlarrow.table"] == b"steps"
    assert md[b"rlarrow.schema_version"] == b"1.1"  # steps 1.1 added `infos`
    assert md[b"rlarrow.format_version"] == b"1.4"
    assert md[b"rlarrow.writer"].startswith(b"rlarrow ")


def test_unknown_table_lists_the_tables():
    with pytest.raises(KeyError, match="runs, episodes, steps, scalars, memory"):
        schema.table("trajectories")


def test_all_problems_reported_at_once():
    bad = pa.table({
        "run_id": pa.array(["r", None]),           # null in a non-null column
        "scope": pa.array(["train", "train"]),
        "tag": pa.array([1, 2]),                    # wrong type
        "step": pa.array([0.5, 1.0]),               # float into int64: not lossless
        "encoding": pa.array(["simple_value", "morse"]),  # not an allowed value
        "colour": pa.array(["red", "blue"]),        # unknown column
    })                                              # and 'value' is missing
    with pytest.raises(rlarrow.SchemaMismatchError) as info:
        schema.conform("scalars", bad)
    err = info.value
    assert len(err.problems) == 6, err.problems
    text = str(err)
    for needle in ("'run_id' must not be null", "'tag': expected string, got int64",
                   "'step': expected int64, got double", "['morse'] not allowed",
                   "unknown column(s) ['colour']", "missing required column 'value'",
                   "expected schema:", "got schema:"):
        assert needle in text, needle
    assert err.table == "scalars"


def test_lossless_casts_are_made_and_lossy_ones_refused():
    ok = schema.conform("scalars", pa.table({
        "run_id": pa.array(["r"], pa.large_string()), "scope": pa.array(["train"]).dictionary_encode(),
        "tag": ["t"], "step": pa.array([3], pa.int32()), "value": pa.array([0.1], pa.float32()),
    }))
    assert ok.schema.field("step").type == pa.int64()
    assert ok.column("value")[0].as_py() == float(np.float32(0.1))  # exact widening
    assert ok.column("wall_time").null_count == 1  # missing nullable column added
    with pytest.raises(rlarrow.SchemaMismatchError, match="without loss"):
        schema.conform("scalars", pa.table({
            "run_id": ["r"], "scope": ["train"], "tag": ["t"], "step": [0],
            "value": pa.array([2**60 + 1], pa.int64()),
        }))


def test_tensor_columns_need_a_fixed_shape():
    ragged = pa.array([[1.0], [1.0, 2.0]], pa.list_(pa.float32()))
    with pytest.raises(rlarrow.SchemaMismatchError, match="no fixed shape"):
        schema.conform("memory", pa.table({
            "run_id": ["r", "r"], "snapshot_id": [0, 0], "memory_index": [0, 1], "env_index": [0, 0],
            "memory_size": [2, 2], "num_envs": [1, 1], "states": ragged,
        }))


def test_memory_tensor_column_layout_is_fixed_per_store(store):
    base = {"run_id": "r", "snapshot_id": 0, "memory_index": [0], "env_index": 0,
            "memory_size": 1, "num_envs": 1}
    store.append("memory", {**base, "states": np.zeros((1, 2), np.float32)})
    with pytest.raises(rlarrow.SchemaMismatchError, match=r"\['actions'\] are not in the store"):
        store.append("memory", {**base, "states": np.zeros((1, 2), np.float32),
                                "actions": np.zeros((1, 1), np.float32)})
    with pytest.raises(rlarrow.SchemaMismatchError, match="the store holds"):
        store.append("memory", {**base, "states": np.zeros((1, 3), np.float32)})


def test_build_repeats_scalars_and_encodes_json_columns():
    t = schema.build("runs", {"run_id": "r", "created_at": [np.datetime64("2026-01-01T00:00:00", "us")],
                              "source": "user", "metadata": {"k": np.int16(3)}})
    assert t.schema.field("created_at").type == pa.timestamp("us", tz="UTC")
    row = t.to_pylist()[0]
    assert row["metadata"] == '{"k":3}'
    assert rlarrow.core.metadata.decode(row["metadata"], row["metadata_types"]) == {"k": np.int16(3)}
    assert type(rlarrow.core.metadata.decode(row["metadata"], row["metadata_types"])["k"]) is np.int16
