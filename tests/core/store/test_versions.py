"""Format versions: older major -> migrate, newer minor -> warn, newer major / damage -> error."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import rlarrow
from rlarrow.cli.commands import cli
from rlarrow.core import migrations, schema
from rlarrow.core.store import MANIFEST_NAME, encode_schema


def _set_manifest(store_path, fn):
    path = store_path / MANIFEST_NAME
    m = json.loads(path.read_text())
    fn(m)
    path.write_text(json.dumps(m))


def make_v0_scalars_store(tmp_path):
    """A store whose scalars table is in a (test-only) v0 layout: 'time' instead of 'wall_time'."""
    store = rlarrow.Store.create(tmp_path / "old")
    v0 = pa.table({
        "run_id": ["r"] * 4, "scope": ["train"] * 4, "tag": ["loss"] * 4,
        "step": pa.array([0, 1, 2, 3], pa.int64()), "value": [4.0, 3.0, 2.0, float("nan")],
        "time": [1.5, 2.5, 3.5, 4.5],
    }).replace_schema_metadata({"rlarrow.table": "scalars", "rlarrow.schema_version": "0.3",
                                "rlarrow.format_version": "1.0"})
    for i, part in enumerate([v0.slice(0, 2), v0.slice(2)]):
        pq.write_table(part, store.path / "scalars" / f"part-2020010{i}T000000000000-0000000{i}.parquet")

    def old(m):
        m["tables"]["scalars"].update(schema_version="0.3", rows=4, schema=encode_schema(v0.schema), files=[
            {"name": f"part-2020010{i}T000000000000-0000000{i}.parquet", "rows": 2, "bytes": 1}
            for i in range(2)])
    _set_manifest(store.path, old)
    return store.path


@pytest.fixture
def v0_migration():
    @migrations.register_migration("scalars", from_major=0)
    def scalars_v0_to_v1(table: pa.Table) -> pa.Table:
        names = ["wall_time" if n == "time" else n for n in table.column_names]
        return table.rename_columns(names)

    yield scalars_v0_to_v1
    migrations.unregister_migration("scalars", from_major=0)


def test_older_major_version_names_the_migration(tmp_path):
    path = make_v0_scalars_store(tmp_path)
    with pytest.raises(rlarrow.FormatVersionError, match=f"rlarrow migrate {path}"):
        rlarrow.Store.open(path)


def test_migrate_without_registered_migration_explains(tmp_path):
    path = make_v0_scalars_store(tmp_path)
    with pytest.raises(rlarrow.FormatVersionError, match="no migration is registered"):
        rlarrow.migrate(path)


def test_cli_migrate_runs_the_registered_migration(tmp_path, v0_migration):
    path = make_v0_scalars_store(tmp_path)
    dry = CliRunner().invoke(cli, ["migrate", str(path), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "would migrate scalars: schema v0 -> v1" in dry.output
    with pytest.raises(rlarrow.FormatVersionError):
        rlarrow.Store.open(path)  # a dry run changes nothing
    result = CliRunner().invoke(cli, ["migrate", str(path)])
    assert result.exit_code == 0, result.output
    store = rlarrow.Store.open(path)
    table = store.read("scalars")
    assert table.column("wall_time").to_pylist() == [1.5, 2.5, 3.5, 4.5]
    assert np.isnan(table.column("value")[3].as_py())
    for f in store.files("scalars"):
        assert schema.read_file_info(f).schema_version == (1, 0)
    assert len(list((path / "scalars").glob("part-2020*"))) == 0  # old files gone
    assert CliRunner().invoke(cli, ["migrate", str(path)]).output.startswith("nothing to do")


def test_interrupted_migration_resumes_file_by_file(tmp_path, v0_migration):
    path = make_v0_scalars_store(tmp_path)
    calls = []

    @migrations.register_migration("scalars", from_major=0)
    def fails_on_second_file(table):
        calls.append(table.num_rows)
        if len(calls) == 2:
            raise RuntimeError("killed")
        return v0_migration(table)

    with pytest.raises(RuntimeError):
        rlarrow.migrate(path)
    with pytest.raises(rlarrow.FormatVersionError):  # still not current
        rlarrow.Store.open(path)
    migrations.register_migration("scalars", from_major=0)(v0_migration)
    rlarrow.migrate(path)  # the first file is already v1 and is not migrated twice
    assert rlarrow.Store.open(path).read("scalars").column("wall_time").to_pylist() == [1.5, 2.5, 3.5, 4.5]


def test_newer_minor_version_warns(populated):
    _set_manifest(populated.path, lambda m: m["tables"]["steps"].update(schema_version="1.7"))
    with pytest.warns(rlarrow.FormatVersionWarning, match="newer minor version"):
        store = rlarrow.Store.open(populated.path)
    assert store.row_count("steps") == 18


def test_newer_major_version_asks_for_an_upgrade(populated):
    # (2.0 is format 1 with manifest segments, which this rlarrow reads: tests/core/store/test_segments.py)
    _set_manifest(populated.path, lambda m: m.update(format_version="3.0"))
    with pytest.raises(rlarrow.FormatVersionError, match="pip install -U rlarrow"):
        rlarrow.Store.open(populated.path)
    # said before the keys are checked: a later format may give them other meanings
    _set_manifest(populated.path, lambda m: m.update(tables=["a list, one day"]))
    with pytest.raises(rlarrow.FormatVersionError, match="store format 3.0 is newer"):
        rlarrow.Store.open(populated.path)


def test_file_checks_name_the_file(tmp_path):
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"x": [1]}), foreign)
    with pytest.raises(rlarrow.UnsupportedInputError, match="foreign.parquet.*not written by rlarrow"):
        schema.read_file_info(foreign)
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"this is not parquet at all")
    with pytest.raises(rlarrow.CorruptFileError, match="garbage.parquet"):
        schema.read_file_info(garbage)


def test_foreign_file_dropped_into_a_table_is_refused(populated):
    foreign = populated.path / "steps" / "part-29990101T000000000000-00000000.parquet"
    pq.write_table(pa.table({"x": [1]}), foreign)
    with pytest.raises(rlarrow.UnsupportedInputError, match="not written by rlarrow"):
        rlarrow.Store.open(populated.path)


def _file_with_version(tmp_path, version: str):
    data = schema.build("scalars", {"run_id": "r", "scope": "train", "tag": "x", "step": [1], "value": [2.0]})
    md = dict(data.schema.metadata)
    md[b"rlarrow.schema_version"] = version.encode()
    path = tmp_path / f"v{version}.parquet"
    pq.write_table(data.replace_schema_metadata(md), path)
    return path


def test_read_file_checks_the_version(tmp_path):
    assert schema.read_file(_file_with_version(tmp_path, "1.0")).num_rows == 1
    with pytest.raises(rlarrow.FormatVersionError, match="rlarrow migrate"):
        schema.read_file(_file_with_version(tmp_path, "0.2"))
    with pytest.raises(rlarrow.FormatVersionError, match="pip install -U rlarrow"):
        schema.read_file(_file_with_version(tmp_path, "2.0"))
    with pytest.warns(rlarrow.FormatVersionWarning, match="newer minor"):
        assert schema.read_file(_file_with_version(tmp_path, "1.4")).num_rows == 1


def test_old_file_dropped_into_a_current_store_names_the_migration(populated, tmp_path):
    old = _file_with_version(tmp_path, "0.2")
    (populated.path / "scalars" / "part-29990101T000000000000-00000001.parquet").write_bytes(old.read_bytes())
    with pytest.raises(rlarrow.FormatVersionError, match=f"rlarrow migrate {populated.path}"):
        rlarrow.Store.open(populated.path)


def test_a_store_of_steps_1_0_reads_and_takes_typed_infos(populated):
    """Steps 1.1 only added the nullable ``infos`` column: a store written at 1.0 needs no migration."""
    import warnings

    root = populated.path
    entry = json.loads((root / MANIFEST_NAME).read_text())["tables"]["steps"]
    for f in entry["files"]:  # the files as rlarrow 1.0 wrote them: no `infos`, version 1.0
        path = root / "steps" / f["name"]
        t = pq.read_table(path)
        assert "infos" not in t.column_names
        md = {**t.schema.metadata, b"rlarrow.schema_version": b"1.0"}
        pq.write_table(t.replace_schema_metadata(md), path)
        f["bytes"] = path.stat().st_size
    _set_manifest(root, lambda m: m["tables"]["steps"].update(schema_version="1.0", files=entry["files"]))
    before = populated.read("steps")
    with warnings.catch_warnings():
        warnings.simplefilter("error", rlarrow.FormatVersionWarning)  # older minor: no warning
        store = rlarrow.Store.open(root)
    assert store.read("steps").equals(before)
    infos = {"qpos": np.arange(6, dtype=np.float32).reshape(3, 2), "flag": np.array([True, False, True])}
    store.append("steps", {"run_id": "new", "episode_id": 0, "step": np.arange(3), "env_index": 0,
                           "observation": {"position": np.zeros((3, 3), np.float32),
                                           "grid": np.zeros((3, 4, 5), np.uint8)}, "infos": infos,
                           "is_first": [True, False, False], "is_last": [False, False, True],
                           "is_terminal": [False, False, True]})
    import pyarrow.compute as pc

    again = rlarrow.Store.open(root)
    new = again.read("steps", filter=pc.field("run_id") == "new")
    assert new.column("infos").to_pylist() == [{"qpos": [0.0, 1.0], "flag": True},
                                                {"qpos": [2.0, 3.0], "flag": False},
                                                {"qpos": [4.0, 5.0], "flag": True}]
    old = again.read("steps", filter=pc.field("run_id") != "new")
    assert old.num_rows == 18 and old.column("infos").null_count == 18
    assert old.select(before.column_names).equals(before)
    # the 1.0 files keep their directory; the run with infos has a layout of its own
    first = before.column("run_id")[0].as_py()
    assert (again.layout_of("steps", first), again.layout_of("steps", "new")) == (1, 2)
