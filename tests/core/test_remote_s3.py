"""Object storage for real: a store pushed to an S3 server the tests start (moto's server mode), read back.

The server is the session's ``s3_server`` (``tests/s3_server.py``); each test has its own prefix
and the standard AWS variables set (``AWS_ENDPOINT_URL``...), which pyarrow's ``s3://`` URIs,
``rlarrow push`` in a subprocess and boto3 read as they are.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import duckdb
import numpy as np
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest
from conftest import episode_columns, populate

import rlarrow
from rlarrow.core.errors import CorruptFileError
from rlarrow.core.remote import RemoteStore, push


def _httpfs_loads() -> bool:
    try:
        duckdb.connect().execute("LOAD httpfs")
    except duckdb.Error:
        return False
    return True


def _scalars(run: str, steps: np.ndarray, values: np.ndarray) -> dict:
    return {"run_id": run, "scope": "train", "tag": "train/loss", "step": steps, "value": values,
            "dtype": "float64"}


def _same(remote: RemoteStore, local: rlarrow.Store) -> None:
    """Every table of ``remote`` reads as ``local``'s, value for value (NaN where NaN), with its schema."""
    assert remote.tables() == local.tables()
    for table in local.tables():
        got, want = remote.read(table), local.read(table)
        assert got.schema.equals(want.schema, check_metadata=True), table
        assert got.num_rows == want.num_rows == remote.row_count(table), table
        for name in want.column_names:
            a, b = got.column(name), want.column(name)
            if b.type in ("double", "float"):  # (Table.equals treats NaN as unequal)
                assert np.array_equal(a.to_numpy(zero_copy_only=False), b.to_numpy(zero_copy_only=False),
                                      equal_nan=True), (table, name)
            else:
                assert a.equals(b), (table, name)


def test_the_server_refuses_a_put_if_absent_on_an_existing_key(s3):
    """Conditional writes (what Delta's put-if-absent commits need) are honoured: a 412."""
    from botocore.exceptions import ClientError

    assert s3.started_in < 30
    client = s3.client()
    key = s3.prefix.split("/", 3)[3] + "/_delta_log/00000000000000000000.json"
    client.put_object(Bucket=s3.bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as caught:
        client.put_object(Bucket=s3.bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=s3.bucket, Key=key)["Body"].read() == b"first"
    # pyarrow finds the server through AWS_ENDPOINT_URL alone
    fs, path = pafs.FileSystem.from_uri(s3.prefix)
    assert isinstance(fs, pafs.S3FileSystem)
    assert fs.get_file_info(f"{path}/_delta_log/00000000000000000000.json").size == 5


def test_a_store_pushed_to_s3_reads_back_value_for_value_now_and_at_an_earlier_version(populated, s3):
    uri = f"{s3.prefix}/runs.rlarrow"
    run = populated.runs().column("run_id")[0].as_py()
    populated.append("scalars", _scalars(run, np.array([2**62, -1]), np.array([np.nan, -0.0])))
    copied = push(populated, uri, progress=False)
    assert len(copied) == sum(len(populated.files(t)) for t in populated.tables())
    first_version = populated.version
    earlier = RemoteStore(uri)
    assert earlier.version == first_version and isinstance(earlier.filesystem, pafs.S3FileSystem)
    _same(earlier, populated)
    # the bytes on the bucket are the local files' bytes
    for local, remote in zip(populated.files("steps"), earlier.files("steps"), strict=True):
        with earlier.filesystem.open_input_stream(remote) as f:
            assert f.read() == local.read_bytes()
    scalars = earlier.read("scalars", ["step", "value"], pc.field("step") >= 2**62)
    assert scalars.column("step").type == "int64" and scalars.column("step")[0].as_py() == 2**62
    assert np.isnan(scalars.column("value")[0].as_py())

    populated.append("steps", episode_columns(run, 9, 4))
    populated.append("scalars", _scalars(run, np.array([11]), np.array([0.25])))
    again = push(populated, uri, progress=False)
    assert sorted({c.split("/")[0] for c in again}) == ["scalars", "stats", "steps"]  # only the new files
    latest = RemoteStore(uri)
    assert latest.version == populated.version > first_version
    _same(latest, populated)
    # a reader that opened the earlier version still reads it whole: what the local store held then
    with rlarrow.Store.open(populated.path, version=first_version) as then:
        _same(earlier, then)
    assert earlier.row_count("steps") + 5 == latest.row_count("steps")
    # DuckDB scans the remote table's pyarrow dataset (its reads go to the bucket)
    steps = latest.dataset("steps")  # noqa: F841 - DuckDB finds it by name
    assert duckdb.sql("select count(*) from steps where is_last").fetchall()[0][0] == 4


def test_rlarrow_push_copies_a_store_to_the_bucket_from_the_aws_variables(populated, s3, clean_env):
    uri = f"{s3.prefix}/cli.rlarrow"
    exe = shutil.which("rlarrow")
    cmd = [exe] if exe else [sys.executable, "-m", "rlarrow"]
    env = {**clean_env, **s3.env}
    out = subprocess.run([*cmd, "push", str(populated.path), uri], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"copied {sum(len(populated.files(t)) for t in populated.tables())} file(s)" in out.stdout
    _same(RemoteStore(uri), populated)
    again = subprocess.run([*cmd, "push", str(populated.path), uri], capture_output=True, text=True, env=env,
                           timeout=120)
    assert again.returncode == 0 and "up to date" in again.stdout, again.stderr


def test_deltalake_reads_a_pushed_table_on_the_bucket_at_each_version(store, s3):
    deltalake = pytest.importorskip("deltalake", reason="needs deltalake (the dev extra) to read the copy")
    uri = f"{s3.prefix}/delta.rlarrow"
    store.append("steps", episode_columns("r", 0, 3))
    push(store, uri, progress=False)
    store.append("steps", episode_columns("r", 1, 5))
    push(store, uri, progress=False)
    table = deltalake.DeltaTable(f"{uri}/steps", storage_options=s3.storage_options)
    assert table.version() == 1
    keys = ["episode_id", "step", "reward", "is_last"]
    for version, rows in ((0, 4), (1, 10)):
        at = deltalake.DeltaTable(f"{uri}/steps", storage_options=s3.storage_options, version=version)
        got = at.to_pyarrow_table(columns=keys).sort_by([("episode_id", "ascending"), ("step", "ascending")])
        with rlarrow.Store.open(store.path, version=version + 1) as then:  # (store version 0: empty)
            want = then.read("steps", keys)
        assert got.num_rows == rows
        assert got.to_pydict() == want.to_pydict()


def test_a_file_missing_on_the_bucket_is_named_with_the_fix(populated, s3):
    uri = f"{s3.prefix}/damaged.rlarrow"
    push(populated, uri, progress=False)
    remote = RemoteStore(uri)
    victim = remote.files("steps")[0]
    remote.filesystem.delete_file(victim)
    with pytest.raises(CorruptFileError, match="push the store again"):
        RemoteStore(uri).read("steps")
    push(populated, uri, progress=False)  # a push again copies what is missing
    assert RemoteStore(uri).read("steps").equals(populated.read("steps"))


@pytest.mark.skipif(not _httpfs_loads(), reason="DuckDB's httpfs extension is not installed and cannot be "
                    "downloaded offline: run `python -c \"import duckdb; duckdb.sql('INSTALL httpfs')\"` "
                    "once with network access to read s3:// with DuckDB's own reader")
def test_duckdb_httpfs_reads_the_pushed_parquet_from_the_bucket(populated, s3):
    uri = f"{s3.prefix}/duck.rlarrow"
    push(populated, uri, progress=False)
    host = s3.endpoint.split("//", 1)[1]
    con = duckdb.connect()
    con.execute("LOAD httpfs")
    con.execute(f"CREATE SECRET (TYPE s3, KEY_ID '{s3.key}', SECRET '{s3.secret}', ENDPOINT '{host}', "
                f"URL_STYLE 'path', USE_SSL false, REGION '{s3.region}')")
    n = con.sql(f"select count(*) from read_parquet('{uri}/steps/*.parquet')").fetchall()[0][0]
    assert n == populated.row_count("steps")


def test_push_then_a_populate_again_leaves_the_first_copy_readable(populated, s3):
    """The manifest moves last: the copy read before a later push still reads (nothing deleted)."""
    uri = f"{s3.prefix}/twice.rlarrow"
    push(populated, uri, progress=False)
    before = RemoteStore(uri)
    populate(populated)
    push(populated, uri, progress=False)
    assert before.read("memory").num_rows == before.row_count("memory")
    now = RemoteStore(uri).row_count("memory")
    assert now == populated.row_count("memory") == 2 * before.row_count("memory")
    assert os.environ["AWS_ENDPOINT_URL"] == s3.endpoint


def test_the_scale_page_s3_example_runs_against_the_server(s3, tmp_path, monkeypatch, capsys):
    """docs/scale.md's S3 block (after the block that makes its store), with only the AWS variables set."""
    import re

    from conftest import REPO

    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "scale.md").read_text(), re.S)
    on_s3 = [b for b in blocks if "s3://rlarrow-docs" in b and "push(" in b]  # (the push, not the engines)
    assert len(on_s3) == 1
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in (blocks[0], on_s3[0]):
        exec(compile(block, "docs/scale.md", "exec"), namespace)  # noqa: S102
    assert capsys.readouterr().out.splitlines()[-2:] == ["410 True", "[{'n': 390}]"]
    assert RemoteStore("s3://rlarrow-docs/runs.rlarrow").read("steps").equals(
        rlarrow.Store.open(tmp_path / "runs.rlarrow").read("steps"))
