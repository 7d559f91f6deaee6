"""Streamed SQL exports (rlarrow.query.export, `rlarrow sql --format csv|json|parquet`): tensors of
every layout as readable values that read back exactly, batch by batch, in bounded memory."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rlarrow
from rlarrow.cli.commands import main
from rlarrow.core.tensors import tensor_type
from rlarrow.query import export, sql
from rlarrow.query import output as _export

EPISODES, LENGTH = 3, 4
SPECIAL = np.array([0.1, np.nan, np.inf, -np.inf, -0.0, 3.4028235e38, 1e-45, 16777216.0], np.float32)


def make_store(path, layout: str, *, dict_obs: bool = True) -> tuple[rlarrow.Store, dict]:
    """Steps whose tensors use ``layout``, with NaN, infinities, -0.0 and extreme float32s."""
    st = rlarrow.Store.create(path)
    if dict_obs:
        obs_type = pa.struct([("grid", tensor_type("uint8", (2, 3), layout=layout)),
                              ("pos", tensor_type("float32", (2, 2), layout=layout))])
    else:
        obs_type = tensor_type("float64", (2, 3), layout=layout)
    st.declare("steps", {"observation": obs_type, "action": tensor_type("float32", (2,), layout=layout)})
    rng = np.random.default_rng(0)
    n = LENGTH + 1
    stored: dict = {"grid": [], "pos": [], "obs": [], "action": []}
    for e in range(EPISODES):
        grid = rng.integers(0, 256, (n, 2, 3), dtype=np.uint8)
        pos = rng.standard_normal((n, 2, 2)).astype(np.float32)
        pos.reshape(-1)[: len(SPECIAL)] = SPECIAL
        obs64 = rng.standard_normal((n, 2, 3))
        obs64[0, 0, :3] = [np.nan, 1e300, 5e-324]
        action = rng.standard_normal((n, 2)).astype(np.float32)
        st.append("steps", {
            "run_id": "r", "episode_id": e, "step": np.arange(n), "env_index": 0,
            "observation": {"grid": grid, "pos": pos} if dict_obs else obs64,
            "action": [*action[:-1], None], "reward": [1.0, 0.5, float("nan"), -0.0, None],
            "discount": [1.0] * LENGTH + [None],
            "is_first": [True] + [False] * LENGTH, "is_last": [False] * LENGTH + [True],
            "is_terminal": [False] * LENGTH + [True],
            "metadata": [{"note": 'a "quoted"\nline', "i": i} for i in range(n)],
        })
        stored["grid"].append(grid)
        stored["pos"].append(pos)
        stored["obs"].append(obs64)
        stored["action"].append(action)
    return st, {k: np.concatenate(v) for k, v in stored.items()}


def number(value, dtype):
    """A parsed JSON/csv number (or the NaN/Infinity spellings) as ``dtype``."""
    if isinstance(value, str):
        value = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[value]
    return np.asarray(value, dtype=np.float64).astype(dtype)


def as_array(nested, dtype) -> np.ndarray:
    return np.vectorize(lambda v: number(v, dtype), otypes=[dtype])(np.array(nested, dtype=object))


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal values of one dtype and shape (NaN equal to NaN, -0.0 told from 0.0)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind != "f":
        return bool(np.array_equal(a, b))
    return bool(np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(b)))


def same_values(a, b) -> bool:
    """Python values equal, NaN equal to NaN (and -0.0 told from 0.0)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


QUERY = "select episode_id, step, observation, action, reward, metadata from steps order by episode_id, step"


def check_rows(rows: list[dict], stored: dict, dict_obs: bool) -> None:
    assert len(rows) == EPISODES * (LENGTH + 1)
    if dict_obs:
        assert same(as_array([r["observation"]["grid"] for r in rows], np.uint8), stored["grid"])
        assert same(as_array([r["observation"]["pos"] for r in rows], np.float32), stored["pos"])
    else:
        assert same(as_array([r["observation"] for r in rows], np.float64), stored["obs"])
    actions = [r["action"] for r in rows]
    assert [a is None for a in actions] == ([False] * LENGTH + [True]) * EPISODES
    got = as_array([a for a in actions if a is not None], np.float32)
    want = stored["action"].reshape(EPISODES, LENGTH + 1, 2)[:, :LENGTH].reshape(-1, 2)
    assert same(got, want)
    rewards = [r["reward"] for r in rows][: LENGTH + 1]
    assert rewards[:2] == [1.0, 0.5] and rewards[2] in ("NaN",) or math.isnan(rewards[2])
    assert math.copysign(1, rewards[3]) == -1 and rewards[4] is None
    assert json.loads(rows[0]["metadata"])["note"] == 'a "quoted"\nline'


def read_csv_rows(text: str) -> list[dict]:
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    out = []
    for r in rows:
        out.append({
            "observation": json.loads(r["observation"]),
            "action": json.loads(r["action"]) if r["action"] else None,
            "reward": float(r["reward"]) if r["reward"] else None,
            "metadata": r["metadata"],
        })
    return out


@pytest.fixture(params=[("binary", True), ("list", True), ("binary", False), ("list", False)],
                ids=["binary-struct", "list-struct", "binary", "list"])
def tensors_store(request, tmp_path):
    layout, dict_obs = request.param
    st, stored = make_store(tmp_path / "s.rlarrow", layout, dict_obs=dict_obs)
    return st, stored, dict_obs


@pytest.fixture
def small_batches(monkeypatch):
    """Batches of 3 rows and row groups of 4, text slices of 7 values: every boundary is crossed."""
    monkeypatch.setattr(_export, "batch_rows", lambda store: 3)
    monkeypatch.setattr(_export, "ROW_GROUP_ROWS", 4)
    monkeypatch.setattr(_export, "TEXT_VALUES", 7)


def test_json_lines_hold_the_stored_tensors(tensors_store, tmp_path, small_batches):
    st, stored, dict_obs = tensors_store
    out = tmp_path / "out.jsonl"
    assert export(st, QUERY, out) == EPISODES * (LENGTH + 1)
    lines = out.read_text().splitlines()
    rows = [json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON")) for line in lines]
    check_rows(rows, stored, dict_obs)
    assert rows[2]["reward"] == "NaN"
    first = lines[0]
    assert first.startswith('{"episode_id": 0, "step": 0, "observation": ')
    if dict_obs:  # floats read back as the float32 they were, written as the shortest text
        assert '"pos": [[0.1, "NaN"], ["Infinity", "-Infinity"]]' in first


def test_csv_cells_hold_the_stored_tensors(tensors_store, tmp_path, small_batches):
    st, stored, dict_obs = tensors_store
    out = tmp_path / "out.csv"
    assert export(st, QUERY, out) == EPISODES * (LENGTH + 1)
    text = out.read_text()
    check_rows(read_csv_rows(text), stored, dict_obs)
    header, first = text.splitlines()[:2]
    assert header == '"episode_id","step","observation","action","reward","metadata"'
    assert first.startswith("0,0,")
    if dict_obs:
        assert '""pos"": [[0.1, NaN], [Infinity, -Infinity]]' in first


def test_parquet_export_equals_the_sql_result(tensors_store, tmp_path, small_batches):
    st, _, _ = tensors_store
    out = tmp_path / "out.parquet"
    query = "select * from transitions order by episode_id, step"
    assert export(st, query, out) == EPISODES * LENGTH
    got = pq.read_table(out)
    want = sql(st, query)
    assert pq.ParquetFile(out).num_row_groups == 2  # batches of 3 rows, cut after 4 rows or more
    assert got.column_names == want.column_names and got.num_rows == want.num_rows
    assert same_values(got.cast(want.schema).to_pylist(), want.to_pylist())


def test_transitions_export_decodes_next_observation(tmp_path):
    st, stored = make_store(tmp_path / "s.rlarrow", "binary", dict_obs=False)
    out = tmp_path / "t.jsonl"
    export(st, "select step, observation, next_observation from transitions where episode_id = 1 "
               "order by step", out)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    obs = stored["obs"].reshape(EPISODES, LENGTH + 1, 2, 3)[1]
    assert same(as_array([r["next_observation"] for r in rows], np.float64), obs[1:])
    assert same(as_array([r["observation"] for r in rows], np.float64), obs[:-1])


def test_renamed_binary_tensors_need_tensor_types(tmp_path):
    st, stored = make_store(tmp_path / "s.rlarrow", "binary", dict_obs=False)
    query = "select observation as o from steps order by episode_id, step limit 1"
    out = tmp_path / "o.jsonl"
    export(st, query, out)
    assert json.loads(out.read_text())["o"] == stored["obs"][0].tobytes().hex()  # bytes: said in hex
    export(st, query, out, tensor_types={"o": "steps.observation"}, overwrite=True)
    assert same(as_array(json.loads(out.read_text())["o"], np.float64), stored["obs"][0])
    with pytest.raises(ValueError, match=r"steps\.observation"):
        export(st, query, out, tensor_types={"o": "steps.nope"}, overwrite=True)


def test_memory_tensors_are_decoded_by_name(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s.rlarrow")
    st.declare("memory", {"states": tensor_type("float32", (2, 2), layout="binary")})
    states = np.arange(16, dtype=np.float32).reshape(4, 2, 2) / 4
    st.append("memory", {"run_id": "r", "snapshot_id": 0, "memory_index": np.arange(4), "env_index": 0,
                         "memory_size": 4, "num_envs": 1, "states": states})
    out = tmp_path / "m.csv"
    export(st, "select memory_index, states from memory order by 1", out)
    cells = [json.loads(r["states"]) for r in csv.DictReader(io.StringIO(out.read_text(), newline=""))]
    assert same(as_array(cells, np.float32), states)
    assert cells[1] == [[1.0, 1.25], [1.5, 1.75]]


def test_export_arguments(tensors_store, tmp_path):
    st, _, _ = tensors_store
    out = tmp_path / "e.csv"
    export(st, "select 1 as x", out)
    with pytest.raises(FileExistsError, match="overwrite"):
        export(st, "select 1 as x", out)
    with pytest.raises(ValueError, match="format"):
        export(st, "select 1 as x", tmp_path / "e.txt")
    assert export(st, "select ? as x", out, params=[3], overwrite=True) == 1
    assert out.read_text() == '"x"\n3\n'
    empty = tmp_path / "empty.csv"
    assert export(st, "select step from steps where false", empty) == 0
    assert empty.read_text() == '"step"\n'
    sink = io.BytesIO()
    export(st, "select 2 as y, 'a,b' as s, null as n, [1.5, null] as l", sink, format="csv")
    assert sink.getvalue() == b'"y","s","n","l"\n2,"a,b",,"[1.5, null]"\n'


def test_a_failed_export_leaves_no_file(tensors_store, tmp_path):
    st, _, _ = tensors_store
    out = tmp_path / "bad.parquet"
    import duckdb

    with pytest.raises((duckdb.Error, pa.ArrowException)):
        export(st, "select case when step = 3 then error('boom') else step end as s from steps", out)
    assert not out.exists() and list(tmp_path.glob("*bad*")) == []


def test_scalar_text_conventions(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s.rlarrow")
    query = ("select 1.0::double as one, 0.1::float as f32, 1e300 as big, 'nan'::double as nan, "
             "'-inf'::double as ninf, true as t, 'x\ty\"z\\' as s, '\\x01\\xff'::blob as b, "
             "{'k': [1, 2]} as st, 9007199254740993::bigint as i")
    out = tmp_path / "s.jsonl"
    export(st, query, out)
    line = out.read_text()
    assert line == ('{"one": 1.0, "f32": 0.1, "big": 1e+300, "nan": "NaN", "ninf": "-Infinity", "t": true, '
                    '"s": "x\\ty\\"z\\\\", "b": "01ff", "st": {"k": [1, 2]}, "i": 9007199254740993}\n')
    export(st, query, tmp_path / "s.csv")
    assert (tmp_path / "s.csv").read_text().splitlines()[1] == \
        '1.0,0.1,1e+300,NaN,-Infinity,true,"x\ty""z\\","01ff","{""k"": [1, 2]}",9007199254740993'


# ------------------------------------------------------------------ the command line

def run_cli(args, capsysbinary):
    with pytest.raises(SystemExit) as done:
        main(args)
    out = capsysbinary.readouterr()
    return done.value.code, out.out, out.err.decode()


def test_cli_csv_and_json_to_stdout_render_tensors(tensors_store, capsysbinary):
    st, stored, dict_obs = tensors_store
    code, out, err = run_cli(["sql", str(st.path), QUERY, "--format", "csv"], capsysbinary)
    assert code == 0, err
    check_rows(read_csv_rows(out.decode()), stored, dict_obs)
    code, out, err = run_cli(["sql", str(st.path), QUERY, "--format", "json"], capsysbinary)
    assert code == 0, err
    check_rows([json.loads(x) for x in out.decode().splitlines()], stored, dict_obs)


def test_cli_writes_files_and_renamed_tensors(tensors_store, tmp_path, capsysbinary):
    st, stored, dict_obs = tensors_store
    target = tmp_path / "o.json"
    query = "select observation as o from steps order by episode_id, step"
    code, _, err = run_cli(["sql", str(st.path), query, "--format", "json", "-o", str(target),
                            "--tensor", "o=steps.observation"], capsysbinary)
    assert code == 0 and f"wrote {EPISODES * (LENGTH + 1)} rows to {target}" in err
    rows = [json.loads(x)["o"] for x in target.read_text().splitlines()]
    key = "pos" if dict_obs else None
    got = as_array([r[key] for r in rows] if key else rows, np.float32 if key else np.float64)
    assert same(got, stored["pos"] if key else stored["obs"])
    code, _, err = run_cli(["sql", str(st.path), "select 1", "--tensor", "o"], capsysbinary)
    assert code != 0 and "NAME=TABLE.COLUMN" in err


def test_cli_parquet_to_a_pipe(tensors_store, tmp_path):
    st, _, _ = tensors_store
    query = "select * from transitions order by episode_id, step"
    out = subprocess.run([sys.executable, "-m", "rlarrow", "sql", str(st.path), query, "--format", "parquet"],
                         capture_output=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr.decode()
    got = pq.read_table(pa.BufferReader(out.stdout))
    want = sql(st, query)
    assert same_values(got.cast(want.schema).to_pylist(), want.to_pylist())


def test_cli_query_errors_stay_one_line(tensors_store, capsysbinary):
    st, _, _ = tensors_store
    code, _, err = run_cli(["sql", str(st.path), "select error('boom') from steps", "--format", "csv"],
                           capsysbinary)
    assert code != 0 and "boom" in err and "Traceback" not in err


# ------------------------------------------------------------------ memory stays bounded

@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_cli_export_streams_a_result_larger_than_its_memory(populated, fmt, tmp_path):
    """1.2 GB of rows through `rlarrow sql --format FMT`: the process stays far below that.

    Holding the result (what `rlarrow sql -o` did) needs more than 1.4 GB; streamed, the
    process holds a few DuckDB batches (about 150 MB each here) besides its 170 MB of code.
    """
    query = "select range as i, repeat(chr(65 + (range % 26)::int), 1200) as s from range(1000000)"
    script = textwrap.dedent(f"""
        import resource, subprocess, sys
        out = subprocess.run([sys.executable, "-m", "rlarrow", "sql", {str(populated.path)!r}, {query!r},
                              "--format", {fmt!r}, "-o", {str(tmp_path / ("out." + fmt))!r}],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    peak_mb = int(done.stdout.split()[-1])
    assert peak_mb < 800, f"peak RSS {peak_mb} MB for a 1.2 GB result"
    if fmt == "parquet":
        assert pq.ParquetFile(tmp_path / "out.parquet").metadata.num_rows == 1_000_000


def test_a_named_pipe_is_written_in_place(tensors_store, tmp_path):
    """-o /dev/stdout or a FIFO: written through, never replaced by a renamed temporary file."""
    import os
    import threading

    st, _, _ = tensors_store
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert export(st, "select step from steps order by episode_id, step limit 3", fifo, format="csv") == 3
    reader.join(timeout=30)
    assert got == [b'"step"\n0\n1\n2\n'] and fifo.is_fifo()
