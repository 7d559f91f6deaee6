"""SQL over a store: views, transitions, RL macros, push-down, Polars, episode iteration, CLI."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pytest
from conftest import episode_columns, populate

import rlarrow
from rlarrow.cli.commands import main
from rlarrow.query import connect, iter_episodes, scan, sql


@pytest.fixture
def store(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s.rlarrow")
    populate(st, episodes=4, length=6)
    return st


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as done:
        main(args)
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


def test_views_cover_every_table_and_an_empty_store_works(store, tmp_path):
    con = connect(store)
    for table in rlarrow.core.schema.TABLE_NAMES:
        assert con.sql(f"select count(*) from {table}").fetchall()[0][0] == store.row_count(table)
    empty = rlarrow.Store.create(tmp_path / "empty.rlarrow")
    con = connect(empty)
    assert con.sql("select count(*) from transitions").fetchall() == [(0,)]
    assert con.sql("select * from episode_returns(0.99)").fetchall() == []


def test_transitions_pair_each_step_with_the_next_within_its_episode(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s.rlarrow")
    cols = episode_columns("r", 0, 5)
    st.append("steps", cols)
    truncated = episode_columns("r", 1, 3, seed=1)
    truncated["is_terminal"] = [False] * 4
    st.append("steps", truncated)
    t = sql(st, "select * from transitions order by episode_id, step")
    assert t.num_rows == 5 + 3  # one per action
    first = t.filter(pa.compute.equal(t["episode_id"], 0))
    # DuckDB returns fixed-size lists as lists: stack them back
    pos = np.stack(first["observation"].combine_chunks().field("position").to_numpy(zero_copy_only=False))
    nxt = np.stack(first["next_observation"].combine_chunks().field("position")
                   .to_numpy(zero_copy_only=False))
    assert np.array_equal(pos, cols["observation"]["position"][:5])
    assert np.array_equal(nxt, cols["observation"]["position"][1:])
    assert first["done"].to_pylist() == [False] * 4 + [True]
    second = t.filter(pa.compute.equal(t["episode_id"], 1))
    assert second["done"].to_pylist() == [False] * 3
    assert second["truncated"].to_pylist() == [False, False, True]


def test_rl_macros_match_numpy(store):
    con = connect(store)
    steps = store.read("steps", columns=["episode_id", "step", "reward", "is_terminal"]).to_pylist()
    got = {r[1]: r for r in con.sql("select * from episode_returns(0.9) order by episode_id").fetchall()}
    for e in range(4):
        rewards = [s["reward"] for s in sorted(steps, key=lambda s: s["step"]) if s["episode_id"] == e]
        rewards = [r for r in rewards if r is not None]
        _, _, n, ret, disc, term = got[e]
        assert n == len(rewards) and ret == pytest.approx(sum(rewards))
        assert disc == pytest.approx(sum(r * 0.9 ** i for i, r in enumerate(rewards)))
        assert term is True
    assert con.sql("select success_rate(terminated) from episodes").fetchall() == [(1.0,)]
    assert con.sql("select discounted_return([1.0, 1.0, 1.0], 0.5)").fetchall() == [(1.75,)]


def test_scalar_smoothing_and_threshold_macros(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s.rlarrow")
    values = np.array([1.0, 3.0, 2.0, 5.0, 4.0, 8.0])
    for run, shift in (("a", 0.0), ("b", 10.0)):
        st.append("scalars", {"run_id": run, "scope": "train", "tag": "loss", "step": np.arange(6) * 10,
                              "value": values + shift, "wall_time": np.arange(6.0)})
    con = connect(st)
    ma = [r[0] for r in con.sql("select moving_average from smoothed(3) where run_id = 'a' order by step")
          .fetchall()]
    assert ma == pytest.approx([np.mean(values[max(0, i - 2):i + 1]) for i in range(6)])
    ema = [r[0] for r in con.sql("select ema from ema(0.6) where run_id = 'a' order by step").fetchall()]
    last, want = 0.0, []
    for i, v in enumerate(values):  # TensorBoard's debiased exponential moving average
        last = last * 0.6 + (1 - 0.6) * v
        want.append(last / (1 - 0.6 ** (i + 1)))
    assert ema == pytest.approx(want)
    assert con.sql("select * from steps_to_threshold('loss', 5)").fetchall() == [("a", 30), ("b", 0)]
    assert con.sql("select * from steps_to_threshold('loss', 100)").fetchall() == [("a", None), ("b", None)]


def test_filters_push_down_to_parquet_row_groups(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s.rlarrow")
    with st.writer("steps", row_group_bytes=4096) as w:
        for e in range(60):
            w.write(episode_columns("r", e, 20, image=False))
    con = connect(st)
    plan = con.sql("explain analyze select sum(reward) from steps where episode_id = 33").fetchall()[0][1]
    scanned, total = map(int, re.search(r"Row Groups Scanned: (\d+) / (\d+)", plan).groups())
    assert total >= 20 and scanned <= 2, plan
    assert "Projections: reward" in plan or "reward" in plan.split("Table Scan", 1)[1]


def test_metadata_keys_are_queryable(store):
    got = sql(store, "select count(*) as n from steps where (metadata->>'t')::int = 2")
    assert got["n"].to_pylist() == [4]
    got = sql(store, "select episode_id from episodes where (metadata->>'episode_return')::double > 0 "
                     "order by episode_id")
    assert got["episode_id"].to_pylist() == [2, 3]


def test_sql_returns_arrow_and_the_connection_converts(store):
    t = sql(store, "select run_id, count(*) as n from steps group by all")
    assert isinstance(t, pa.Table) and t["n"].to_pylist() == [store.row_count("steps")]
    con = connect(store)
    assert con.sql("select count(*) as n from episodes").pl()["n"][0] == 4
    assert con.sql("select count(*) as n from episodes").df()["n"][0] == 4


def test_sql_output_polars_and_pandas_keep_values(store):
    import polars as pl

    q = ("select 9007199254740993::bigint as big, 'nan'::double as x, null::double as missing, "
         "true as flag, ['1.5'::float, '-0.0'::float] as v")
    df = sql(store, q, output="polars")
    assert isinstance(df, pl.DataFrame)
    assert df["big"][0] == 2**53 + 1 and df["big"].dtype == pl.Int64
    assert np.isnan(df["x"][0]) and df["missing"][0] is None and df["flag"].dtype == pl.Boolean
    assert df["v"].dtype == pl.List(pl.Float32) and np.signbit(df["v"][0][1])
    pdf = sql(store, q, output="pandas")
    assert pdf["big"].iloc[0] == 2**53 + 1 and str(pdf["big"].dtype) == "int64"
    assert np.isnan(pdf["x"].iloc[0]) and pdf["flag"].dtype == bool
    with pytest.raises(ValueError, match="'arrow', 'polars' or 'pandas'"):
        sql(store, "select 1", output="numpy")


def test_scan_is_a_polars_lazy_frame(store, tmp_path):
    import polars as pl

    lf = scan(store, "scalars")
    assert isinstance(lf, pl.LazyFrame)
    assert lf.filter(pl.col("step") >= 5).collect().height == 5
    assert scan(rlarrow.Store.create(tmp_path / "e"), "steps").collect().height == 0


def test_iter_episodes_filters_and_reads_only_what_is_asked(store):
    eps = list(iter_episodes(store, "(metadata->>'episode_return')::double > 0",
                             columns=["observation", "reward"]))
    assert [e["episode_id"] for e in eps] == [2, 3]
    e = eps[0]
    assert set(e) == {"run_id", "episode_id", "step", "observation", "reward"}
    assert e["observation"]["grid"].dtype == np.uint8 and e["observation"]["grid"].shape == (7, 4, 5)
    assert np.isnan(e["reward"][-1]) and e["step"].tolist() == list(range(7))
    want = episode_columns(e["run_id"], 2, 6)
    assert np.array_equal(e["observation"]["grid"], want["observation"]["grid"])
    assert len(list(iter_episodes(store))) == 4


def test_iter_episodes_as_torch(store):
    torch = pytest.importorskip("torch", reason="the torch extra gives tensors")
    (e, *_) = iter_episodes(store, columns=["observation", "is_last"], as_torch=True)
    assert isinstance(e["observation"]["position"], torch.Tensor) and e["is_last"].dtype == torch.bool


def test_cli_sql_formats(store, tmp_path, capsys):
    path = str(store.path)
    code, out, _ = run_cli(["sql", path, "select episode_id, \"return\" from episodes order by 1"], capsys)
    assert code == 0 and "episode_id" in out and "│" in out
    code, out, _ = run_cli(["sql", path, "select episode_id from episodes order by 1", "--format", "csv"],
                           capsys)
    assert out.splitlines() == ['"episode_id"', "0", "1", "2", "3"]
    code, out, _ = run_cli(["sql", path, "select episode_id from episodes order by 1 limit 2",
                            "--format", "json"], capsys)
    assert [json.loads(line) for line in out.splitlines()] == [{"episode_id": 0}, {"episode_id": 1}]
    target = tmp_path / "t.parquet"
    code, _, err = run_cli(["sql", path, "select * from transitions", "--format", "parquet",
                            "-o", str(target)], capsys)
    assert code == 0 and "wrote" in err
    import pyarrow.parquet as pq

    assert pq.read_table(target).num_rows == 4 * 6
    code, _, err = run_cli(["sql", path, "select nope from steps"], capsys)
    assert code != 0 and "nope" in err and "Traceback" not in err


# ------------------------------------------------------------------ transitions in any row order

# the view as rlarrow defined it first: one window over every step (the reference)
WINDOW_TRANSITIONS = """
select run_id, episode_id, env_index, step, observation, action, reward, discount,
       next_observation, coalesce(next_is_terminal, false) as done,
       coalesce(next_is_last and not next_is_terminal, false) as truncated
from (select *, lead(observation) over w as next_observation, lead(is_terminal) over w as next_is_terminal,
             lead(is_last) over w as next_is_last, lead(step) over w as next_step
      from steps window w as (partition by run_id, episode_id order by step))
where next_step is not null and action is not null
"""


def _rows(cols: dict, idx) -> dict:
    out = {}
    for k, v in cols.items():
        if isinstance(v, dict):
            out[k] = {f: np.asarray(x)[idx] for f, x in v.items()}
        elif isinstance(v, (list, np.ndarray)):
            out[k] = [v[i] for i in idx] if isinstance(v, list) else v[idx]
        else:
            out[k] = v
    return out


@pytest.mark.parametrize("settings", [[], ["set preserve_insertion_order = false", "set threads = 2"],
                                      ["set threads = 1"]])
def test_transitions_equal_the_window_definition_whatever_the_row_order(tmp_path, settings):
    st = rlarrow.Store.create(tmp_path / "s.rlarrow")
    eps = {e: episode_columns("r", e, 6 + e, env_index=e % 2, image=False) for e in range(6)}
    st.append("steps", _rows(eps[0], np.arange(7)))                 # in order
    st.append("steps", _rows(eps[1], np.arange(5, 8)))              # second half first,
    st.append("steps", _rows(eps[1], np.arange(0, 5)))              # then the first half
    rng = np.random.default_rng(1)
    st.append("steps", _rows(eps[2], rng.permutation(9)))           # shuffled
    st.append("steps", _rows(eps[3], np.array([0, 1, 2, 4, 5, 6, 7, 8, 9])))  # a gap: step 3 missing
    for t in range(11):                                               # two environments interleaved
        for e in (4, 5):
            st.append("steps", _rows(eps[e], [t]))
    st.append("steps", _rows(eps[5], [11]))
    st.append("steps", _rows(episode_columns("q", 0, 3, image=False), np.arange(4)))  # another run
    con = connect(st)
    for s in settings:
        con.execute(s)
    order = " order by run_id, episode_id, step"
    got = con.sql("select * from transitions" + order).to_arrow_table()
    want = con.sql(WINDOW_TRANSITIONS + order).to_arrow_table()
    assert got.num_rows == want.num_rows == 6 + 7 + 8 + 8 + 10 + 11 + 3
    assert got.equals(want)
    pc = pa.compute
    gap = got.filter(pc.and_(pc.equal(got["episode_id"], 3), pc.equal(got["run_id"], "r")))
    assert gap["step"].to_pylist() == [0, 1, 2, 4, 5, 6, 7, 8]  # step 2 pairs with step 4, as the window did
    assert con.sql("select count(*) from transitions").fetchall() == [(want.num_rows,)]


def test_transitions_stream_in_one_ordered_pass(store):
    plan = connect(store).sql("explain select * from transitions").fetchall()[0][1]
    assert "STREAMING_WINDOW" in plan.upper().replace(" ", "_")


@pytest.mark.parametrize("weight", [0.0, 0.05, 0.6, 0.95, 0.999])
def test_ema_takes_the_whole_history_across_blocks(tmp_path, weight):
    """The ema macro sums in blocks of 600 / -ln(w) points (200 at w = 0.05, 1,174 at 0.6):
    5,000 points with signs, magnitudes and ties in step cross many block edges, and must
    equal TensorBoard's recursion to 1e-9."""
    rng = np.random.default_rng(7)
    n = 5_000
    values = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)
    step = np.sort(rng.integers(0, n // 2, n))  # ties: ordered by wall_time
    st = rlarrow.Store.create(tmp_path / "s.rlarrow")
    for run in ("a", "b"):
        st.append("scalars", {"run_id": run, "scope": "train", "tag": "loss", "step": step,
                              "value": values if run == "a" else values[::-1].copy(),
                              "wall_time": np.arange(n, dtype=float)})
    got = connect(st).sql(f"select run_id, ema from ema({weight}) order by run_id, step, wall_time")
    got = got.fetchnumpy()
    for run, series in (("a", values), ("b", values[::-1])):
        last, want = 0.0, []
        for i, v in enumerate(series):
            last = last * weight + (1 - weight) * v
            want.append(last / (1 - weight ** (i + 1)))
        mine = got["ema"][got["run_id"] == run]
        assert np.allclose(mine, want, rtol=1e-9, atol=1e-12 * np.abs(values).max())


def test_connect_ema_window_is_deprecated(store):
    with pytest.warns(DeprecationWarning, match="ema_window"):
        connect(store, ema_window=100)


@pytest.mark.parametrize("name", ["views", "sql_functions", "sql_text", "relations", "frames",
                                  "duckdb_errors"])
def test_each_module_of_the_sql_front_says_what_it_owns_and_its_examples_run(name, tmp_path, monkeypatch):
    """connection.py's parts: documented, under 800 lines, examples run; their names still import from it."""
    import doctest
    import importlib

    import rlarrow.query.connection as connection

    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(f"rlarrow.query.{name}")
    assert module.__doc__ and len(module.__doc__.split()) > 10, f"{name} has no docstring"
    with open(module.__file__) as f:
        assert len(f.read().splitlines()) <= 800
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted and result.failed == 0
    for public in module.__all__:
        if hasattr(connection, public):  # what connection.py exported is the same object
            assert getattr(connection, public) is getattr(module, public)
    assert {"connect", "export", "export_relation", "iter_episodes", "layout_notes", "scan", "sql"} <= \
        set(connection.__all__)
