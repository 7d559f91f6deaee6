"""The `rlarrow` command: --version, info, compact, and friendly errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

import rlarrow


def rlarrow_cmd(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("rlarrow") or None
    cmd = [exe, *args] if exe else [sys.executable, "-m", "rlarrow", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_version():
    out = rlarrow_cmd("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"rlarrow, version {rlarrow.__version__}"


def test_info_lists_tables_rows_runs_versions_and_size(populated):
    out = rlarrow_cmd("info", str(populated.path))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for table, rows in [("runs", 1), ("episodes", 3), ("steps", 18), ("scalars", 10), ("memory", 8)]:
        line = next(x for x in text.splitlines() if x.startswith(table + " "))
        assert f" {rows} " in line and line.rstrip().endswith("v1.0"), line
    run_id = populated.runs().column("run_id")[0].as_py()
    assert run_id in text and "populate" in text
    assert "on disk" in text and "KiB" in text
    assert "steps.observation: struct<position" in text


def test_info_json(populated):
    out = rlarrow_cmd("info", str(populated.path), "--json")
    data = json.loads(out.stdout)
    assert data["tables"]["steps"]["rows"] == 18
    assert data["tables"]["steps"]["schema_version"] == "1.0"
    assert data["runs"][0]["name"] == "populate"


@pytest.mark.parametrize("args", [["info", "/no/such/store"], ["compact", "/"]])
def test_errors_are_one_line_without_traceback(args):
    out = rlarrow_cmd(*args)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert "Error" in out.stderr


def test_compact_command(store):
    for i in range(3):
        store.append("scalars", {"run_id": "r", "scope": "s", "tag": "t", "step": [i], "value": [1.0]})
    out = rlarrow_cmd("compact", str(store.path))
    assert out.returncode == 0, out.stderr
    assert "scalars: 3 -> 1 files" in out.stdout


def test_push_command_copies_to_a_uri_and_only_new_files_after(populated, tmp_path):
    store = populated
    dest = f"file://{tmp_path}/bucket/runs.rlarrow"
    out = rlarrow_cmd("push", str(store.path), dest)
    assert out.returncode == 0, out.stderr
    n = sum(len(store.files(t)) for t in store.tables())
    assert f"copied {n} file(s)" in out.stdout
    from rlarrow.remote import RemoteStore

    assert RemoteStore(dest).read("steps").equals(store.read("steps"))
    again = rlarrow_cmd("push", str(store.path), dest)
    assert again.returncode == 0 and "up to date" in again.stdout
    bad = rlarrow_cmd("push", str(store.path), "nosuchscheme://x/y")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_sql_renders_tensor_columns_as_values(populated, fmt):
    """`rlarrow sql --format csv|json` on dict observations and tensor actions: values, no traceback."""
    import csv
    import io

    import numpy as np

    query = "select observation, action from steps order by episode_id, step"
    out = rlarrow_cmd("sql", str(populated.path), query, "--format", fmt)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    if fmt == "csv":
        rows = [{k: json.loads(v) if v else None for k, v in r.items()}
                for r in csv.DictReader(io.StringIO(out.stdout, newline=""))]
    else:
        rows = [json.loads(line) for line in out.stdout.splitlines()]
    stored = populated.read("steps", columns=["episode_id", "step", "observation", "action"])
    stored = stored.sort_by([("episode_id", "ascending"), ("step", "ascending")])
    obs = rlarrow.tensors.to_numpy(stored.column("observation"))
    assert len(rows) == stored.num_rows == 18
    assert np.array_equal(np.array([r["observation"]["position"] for r in rows], np.float32), obs["position"])
    assert np.array_equal(np.array([r["observation"]["grid"] for r in rows], np.uint8), obs["grid"])
    assert rows[0]["action"] == stored.column("action")[0].as_py() and rows[5]["action"] is None
