"""DuckDB, Polars and pyarrow.dataset read every table of a store without rlarrow."""

from __future__ import annotations

import importlib.util

import duckdb
import numpy as np
import polars as pl
import pyarrow.dataset as ds
import pytest
from conftest import add_video_row

from rlarrow.core import schema

# (the videos table's row is an mp4 encoded with PyAV)
TABLES = [pytest.param(t, marks=pytest.mark.skipif(
    importlib.util.find_spec("av") is None, reason="the videos table's row is encoded with PyAV: pip install "
    "'rlarrow[video]'")) if t == "videos" else t for t in schema.TABLE_NAMES]
# stats: 3 commits of steps, one episode each, 5 columns: a segment row and a block row each
ROWS = {"runs": 1, "episodes": 3, "steps": 18, "scalars": 10, "memory": 8, "sources": 2, "stats": 30,
        "videos": 1}


@pytest.fixture
def engine_store(populated, request):
    # A writer's unfinished temporary file must stay invisible to every engine.
    (populated.path / "steps" / ".tmp-host-1-part-x.parquet.partial").write_bytes(b"PAR1")
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    if params.get("table") == "videos":
        add_video_row(populated)
    return populated


@pytest.mark.parametrize("table", TABLES)
def test_duckdb_reads_every_table(engine_store, table):
    glob = f"{engine_store.path}/{table}/**/*.parquet"
    rel = duckdb.sql(f"select * from read_parquet('{glob}')")
    assert rel.columns == engine_store.read(table).column_names
    assert duckdb.sql(f"select count(*) from read_parquet('{glob}')").fetchall()[0][0] == ROWS[table]


@pytest.mark.parametrize("table", TABLES)
def test_polars_reads_every_table(engine_store, table):
    frame = pl.scan_parquet(f"{engine_store.path}/{table}/**/*.parquet").collect()
    assert frame.height == ROWS[table]
    assert frame.columns == engine_store.read(table).column_names


@pytest.mark.parametrize("table", TABLES)
def test_pyarrow_dataset_reads_every_table(engine_store, table):
    t = ds.dataset(engine_store.path / table, format="parquet").to_table()
    assert t.num_rows == ROWS[table]
    assert t.schema.remove_metadata().equals(engine_store.schema(table))


def test_engines_see_tensors_with_shape_and_dtype(engine_store):
    glob = f"{engine_store.path}/steps/*.parquet"
    types = dict(duckdb.sql(f"describe select observation, action from read_parquet('{glob}')")
                 .fetchall()[i][:2] for i in range(2))
    assert types["observation"].replace('"', "") == "STRUCT(position FLOAT[], grid UTINYINT[][])"
    assert types["action"] == "BIGINT[]"
    grid = duckdb.sql(f"select observation.grid from read_parquet('{glob}') "
                      "where episode_id = 0 and step = 0").fetchall()[0][0]
    assert np.array(grid).shape == (4, 5)
    frame = pl.read_parquet(glob)
    assert frame.schema["observation"] == pl.Struct(
        {"position": pl.Array(pl.Float32, 3), "grid": pl.Array(pl.UInt8, (4, 5))})
    memory = pl.read_parquet(f"{engine_store.path}/memory/*.parquet")
    assert memory.schema["terminated"] == pl.Array(pl.Boolean, 1)


def test_sql_over_the_store_answers_rl_questions(engine_store):
    root = engine_store.path
    per_episode = duckdb.sql(
        f"select episode_id, sum(reward) as ret, count(*) as n "
        f"from read_parquet('{root}/steps/*.parquet') group by episode_id order by episode_id"
    ).fetchall()
    assert [n for _, _, n in per_episode] == [6, 6, 6]
    joined = duckdb.sql(
        f"select r.name, count(*) from read_parquet('{root}/runs/*.parquet') r "
        f"join read_parquet('{root}/episodes/*.parquet') e using (run_id) group by r.name"
    ).fetchall()
    assert joined == [("populate", 3)]
