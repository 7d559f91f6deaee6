"""One definition of ``transitions`` (rlarrow.core.transitions): SQL, torch and Ray give the same rows.

One real store (two runs; a terminated and a truncated episode; an episode split over two
commits; steps in small row groups; a NaN reward; dict observations) is read three ways:
``rlarrow.sql(store, "select * from transitions")``, ``rlarrow.train.torch.StreamingDataset(store,
"transitions")`` and ``rlarrow.train.ray.read_samples(store, "transitions")``. Sorted by run,
episode and step, they must be equal row for row and value for value (NaN where NaN).
"""

from __future__ import annotations

import doctest
import os

import numpy as np
import pyarrow as pa
import pytest
from conftest import episode_columns

import rlarrow
from rlarrow.core import transitions
from rlarrow.core.tensors import tensor_type

# the columns asked of the samples readers: the keys (by name; run_id is text, read by filter)
# and every transition column
KEYS = ("episode_id", "env_index", "step")
SAMPLE_COLUMNS = [*KEYS, *[c for c in transitions.NAMES if c != "run_id" and c not in KEYS]]
# episodes: (run, episode, actions, terminated)
EPISODES = [("a", 0, 5, True), ("a", 1, 4, False), ("a", 2, 6, True), ("a", 3, 3, True),
            ("b", 0, 4, True), ("b", 1, 2, False), ("b", 2, 9, True)]
NAN_AT = ("a", 0, 2)  # (run, episode, step) whose reward is NaN


def _rows(cols: dict, idx) -> dict:
    """Rows ``idx`` of one episode's columns (episode_columns' layout)."""
    out = {}
    for k, v in cols.items():
        if isinstance(v, dict):
            out[k] = {f: np.asarray(x)[idx] for f, x in v.items()}
        elif isinstance(v, (list, np.ndarray)):
            out[k] = [v[i] for i in idx] if isinstance(v, list) else np.asarray(v)[idx]
        else:
            out[k] = v
    return out


def _episode(run: str, episode: int, actions: int, terminated: bool) -> dict:
    cols = episode_columns(run, episode, actions, env_index=episode % 2, seed=ord(run))
    if not terminated:  # truncated: the last step is last but not terminal, its discount not 0
        cols["is_terminal"] = [False] * (actions + 1)
        cols["discount"] = [1.0] * actions + [None]
    if (run, episode) == NAN_AT[:2]:
        cols["reward"][NAN_AT[2]] = float("nan")
    return cols


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("transitions") / "s.rlarrow"
    st = rlarrow.Store.create(path)
    st.declare("steps", {"observation": pa.struct([("position", tensor_type("float32", (3,))),
                                                   ("grid", tensor_type("uint8", (4, 5)))]),
                         "action": tensor_type("int64", (2,))})
    eps = {(r, e): _episode(r, e, n, t) for r, e, n, t in EPISODES}
    st.append("steps", eps["a", 0])
    st.append("steps", eps["a", 1])
    st.append("steps", _rows(eps["a", 2], np.arange(0, 4)))  # episode a/2: its first 4 steps ...
    st.append("steps", eps["a", 3])                          # (another episode's commit between)
    st.append("steps", _rows(eps["a", 2], np.arange(4, 7)))  # ... and the rest, a later commit
    with st.writer("steps", row_group_bytes=2000) as w:      # run b: episodes across row groups
        for r, e, _, _ in EPISODES:
            if r == "b":
                w.write(eps[r, e])
    assert len(st.files("steps")) == 6
    return st


def _flat(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = value


def _sorted(cols: dict) -> dict:
    order = np.lexsort((cols["step"], cols["episode_id"]))
    return {k: v[order] for k, v in cols.items()}


def _from_sql(store, run: str) -> dict:
    table = rlarrow.sql(store, f"select * from transitions where run_id = '{run}'")
    assert table.column_names == list(transitions.NAMES)
    out: dict = {}
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        if name == "run_id":
            assert set(col.to_pylist()) == {run}
            continue
        if pa.types.is_struct(col.type):  # DuckDB gives tensors as (nested) lists
            for i, field in enumerate(col.type):
                out[f"{name}.{field.name}"] = np.array(col.field(i).to_pylist())
        elif pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type):
            out[name] = np.array(col.to_pylist())
        else:
            out[name] = col.to_numpy(zero_copy_only=False)
    return _sorted(out)


def _from_torch(store, run: str) -> dict:
    pytest.importorskip("torch", reason="the torch extra: pip install 'rlarrow[torch]'")
    from rlarrow.train.torch import StreamingDataset

    ds = StreamingDataset(store, "transitions", columns=SAMPLE_COLUMNS, filter=f"run_id = '{run}'",
                          batch_size=100_000, shuffle=False)
    batches = list(ds)
    assert len(batches) == 1
    out: dict = {}
    for name, value in batches[0].items():
        _flat(name, value, out)
    return _sorted({k: v.numpy() for k, v in out.items()})


def _want(run: str) -> dict:
    """The transitions as the definition says, from the episodes written (NumPy, by hand)."""
    rows: dict[str, list] = {}
    for r, e, n, terminated in EPISODES:
        if r != run:
            continue
        cols = _episode(r, e, n, terminated)
        for t in range(n):  # one per action: the step and the next row of its episode
            row = {"episode_id": e, "env_index": e % 2, "step": t,
                   "observation.position": cols["observation"]["position"][t],
                   "observation.grid": cols["observation"]["grid"][t],
                   "action": cols["action"][t], "reward": cols["reward"][t], "discount": cols["discount"][t],
                   "next_observation.position": cols["observation"]["position"][t + 1],
                   "next_observation.grid": cols["observation"]["grid"][t + 1],
                   "done": bool(cols["is_terminal"][t + 1]),
                   "truncated": bool(cols["is_last"][t + 1]) and not cols["is_terminal"][t + 1]}
            for k, v in row.items():
                rows.setdefault(k, []).append(v)
    return _sorted({k: np.array(v) for k, v in rows.items()})


def _unmasked(got: dict) -> dict:
    """The samples without their masks, checked: every transition here has its reward, discount
    and next observation (each episode keeps its final one)."""
    masks = {k for k in got if k.endswith("_is_pad")}
    # (the next observation is masked, not required: a terminal transition without its final
    # observation is kept; the observation, required on the step row, has no mask of its own)
    assert masks == {"reward_is_pad", "discount_is_pad", "next_observation_is_pad"}
    assert not any(np.asarray(got[k]).any() for k in masks)
    return {k: v for k, v in got.items() if k not in masks}


def _assert_same(got: dict, want: dict, what: str) -> None:
    assert sorted(got) == sorted(want), what
    for k in want:
        a, b = np.asarray(got[k]), np.asarray(want[k])
        assert a.shape == b.shape, f"{what}: {k} {a.shape} != {b.shape}"
        same = np.array_equal(a.astype(b.dtype), b, equal_nan=b.dtype.kind == "f")
        assert same, f"{what}: column {k} differs"


@pytest.mark.parametrize("run", ["a", "b"])
def test_sql_and_torch_give_the_transitions_the_definition_says(store, run):
    want = _want(run)
    sql = _from_sql(store, run)
    _assert_same(sql, want, "sql")
    torch_rows = _unmasked(_from_torch(store, run))
    _assert_same(torch_rows, sql, "torch vs sql")
    # the NumPy side keeps the stored dtypes
    assert torch_rows["observation.position"].dtype == np.float32
    assert torch_rows["observation.grid"].dtype == np.uint8 and torch_rows["action"].dtype == np.int64
    n = sum(a for r, _, a, _ in EPISODES if r == run)
    assert len(want["step"]) == n  # one per action: an episode's last row makes none


def test_the_episodes_that_matter_are_all_there(store):
    got = _from_sql(store, "a")
    ends = {(int(e), bool(d), bool(t)) for e, d, t, s in
            zip(got["episode_id"], got["done"], got["truncated"], got["step"], strict=True)
            if (d or t)}
    assert ends == {(0, True, False), (1, False, True), (2, True, False), (3, True, False)}
    split = got["step"][got["episode_id"] == 2]
    assert split.tolist() == list(range(6))  # step 3 pairs with step 4 of the later commit
    nan = (got["episode_id"] == NAN_AT[1]) & (got["step"] == NAN_AT[2])
    assert np.isnan(got["reward"][nan]).all() and np.isfinite(got["reward"][~nan]).all()


@pytest.mark.parametrize("run", ["a", "b"])
def test_ray_gives_what_sql_gives(store, run):
    ray = pytest.importorskip("ray", reason="Ray Data is the optional extra: pip install 'rlarrow[ray]'")
    import rlarrow.train.ray as rray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False,
                 object_store_memory=128 << 20)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ds = rray.read_samples(store, "transitions", columns=SAMPLE_COLUMNS, filter=f"run_id = '{run}'")
        got = ray.data.Dataset.take_batch(ds, batch_size=100_000, batch_format="numpy")
    finally:
        if started:
            ray.shutdown()
    _assert_same(_unmasked(_sorted(dict(got))), _from_sql(store, run), "ray vs sql")


def test_both_constructions_derive_from_the_one_definition(store):
    from rlarrow.train import samples

    assert samples.TRANSITION_COLUMNS == list(transitions.STEP_COLUMNS)
    con = rlarrow.query.connect(store)
    assert con.sql("select * from transitions").columns == list(transitions.NAMES)
    decoded = con.sql("select * from transitions_decoded").columns
    assert decoded == list(transitions.NAMES)
    # from_windows: the step row's columns, the next row's observation, the flags from the next row
    windows = {"observation.x": np.array([[1.0, 2.0]]), "reward": np.array([[0.5, np.nan]]),
               "is_terminal": np.array([[False, False]]), "is_last": np.array([[False, True]])}
    out = transitions.from_windows(windows)
    assert list(out) == ["observation.x", "next_observation.x", "reward", "done", "truncated"]
    assert out["next_observation.x"].tolist() == [2.0] and out["reward"].tolist() == [0.5]
    assert out["done"].tolist() == [False] and out["truncated"].tolist() == [True]


def test_sql_view_names_its_view_and_steps_source():
    text = transitions.sql_view("transitions_2", "steps_2")
    assert text.startswith("create or replace view transitions_2 as")
    assert "from steps_2)" in text and "from steps)" not in text


def test_module_examples_run():
    result = doctest.testmod(transitions, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
