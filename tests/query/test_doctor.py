"""The data doctor (rlarrow.query.doctor, `rlarrow check`): each defect planted via the Store API is found."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from conftest import FIXTURES, populate

import rlarrow
from rlarrow.cli.check import CHECK_NAMES, check
from rlarrow.core.errors import ArgumentError, StoreError
from rlarrow.core.tensors import TensorType, tensor_type, to_arrow
from rlarrow.query.doctor import CHECKS, FIX_SOURCE, Finding, check_store, fix_store

RUN = "r"
EPISODES = 4
LENGTH = 60  # steps per episode of the clean store: 240 rows, enough for 10-sigma action spikes
SKRL_NPZ = next((FIXTURES / "skrl" / "wrapped" / "memories").glob("*.npz"))


def steps_of(episode_id: int, n: int, *, run_id: str = RUN, terminal: bool = True, obs_dim: int = 4) -> dict:
    """One episode of ``n`` steps in RLDS alignment: random float observations and actions."""
    rng = np.random.default_rng(1000 * episode_id + n)
    last = np.arange(n) == n - 1
    return {
        "run_id": run_id, "episode_id": episode_id, "step": np.arange(n), "env_index": 0,
        "observation": rng.standard_normal((n, obs_dim)).astype(np.float32),
        "action": [*rng.standard_normal((n - 1, 2)).astype(np.float32), None],
        "reward": [*(float(x) for x in rng.standard_normal(n - 1)), None],
        "discount": [*([1.0] * (n - 2)), 0.0 if terminal else 1.0, None][-n:],
        "is_first": np.arange(n) == 0, "is_last": last, "is_terminal": last & terminal,
    }


def episode_row(episode_id: int, n: int, *, run_id: str = RUN, terminated: bool = True,
                partial_end: bool = False) -> dict:
    return {"run_id": run_id, "episode_id": [episode_id], "env_index": 0, "num_steps": [n], "return": [0.0],
            "terminated": [terminated], "truncated": [not terminated and not partial_end],
            "partial_start": [False], "partial_end": [partial_end]}


def add_episode(st: rlarrow.Store, episode_id: int, n: int, *, edit=None, row: bool = True, **kw) -> dict:
    """Append an episode's steps (after ``edit(columns)`` plants a defect) and its episodes row."""
    cols = steps_of(episode_id, n, **{k: v for k, v in kw.items() if k in ("run_id", "terminal", "obs_dim")})
    if edit is not None:
        edit(cols)
    st.append("steps", cols)
    if row:
        st.append("episodes", episode_row(episode_id, n, **{k: v for k, v in kw.items()
                                                          if k in ("run_id", "terminated", "partial_end")}))
    return cols


def memory_rows(snapshot_id: int, *, write_pointer: int = 2, is_full: bool = False, filled=None) -> dict:
    size, envs = 4, 2
    index = np.arange(size * envs)
    memory_index = index // envs
    return {"run_id": RUN, "snapshot_id": snapshot_id, "memory_index": memory_index,
            "env_index": index % envs,
            "memory_size": size, "num_envs": envs, "is_full": is_full, "write_pointer": write_pointer,
            "env_pointer": 0, "filled": memory_index < 2 if filled is None else filled,
            "states": np.arange(size * envs * 3, dtype=np.float32).reshape(-1, 3)}


@pytest.fixture
def clean(tmp_path) -> rlarrow.Store:
    """A store with nothing wrong: a run, episodes and their steps, scalars, a memory snapshot."""
    st = rlarrow.Store.create(tmp_path / "clean.rlarrow")
    st.add_run(source="test", run_id=RUN)
    for e in range(EPISODES):
        add_episode(st, e, LENGTH)
    st.append("scalars", {"run_id": RUN, "scope": "train", "tag": "loss", "step": np.arange(10),
                          "value": np.linspace(1, 0, 10), "wall_time": 1.7e9 + np.arange(10.0)})
    st.append("memory", memory_rows(0))
    return st


def found(report, name: str) -> list[Finding]:
    return [f for f in report.findings if f.check == name]


def where(f: Finding) -> tuple:
    return f.severity, f.table, f.run_id, f.episode_id, f.step


# ------------------------------------------------------------------ clean stores


def test_a_clean_store_has_no_findings(clean):
    report = check_store(clean)
    assert report.findings == [] and report.ok and report.errors == report.warnings == 0
    assert report.skipped == {} and list(report.counts) == list(CHECKS)
    assert str(report) == f"no problems found in {len(CHECKS)} checks" and len(CHECKS) == 16


def test_stores_rlarrow_writes_are_clean(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s")
    populate(st)  # dict observations (a list-layout and a binary-layout-sized field), int actions
    report = check_store(st)
    assert report.findings == [], str(report)


# ------------------------------------------------------------------ alignment


def test_a_missing_is_first_is_named(clean):
    def edit(cols):
        cols["is_first"] = np.zeros(LENGTH, bool)

    add_episode(clean, 9, LENGTH, edit=edit)
    report = check_store(clean, checks=["alignment"])
    (f,) = found(report, "alignment")
    assert where(f) == ("error", "steps", RUN, 9, 0)
    assert str(f) == f"steps run={RUN} episode=9 step=0: the first step lacks is_first"
    assert not report.ok


def test_is_first_after_the_first_step(clean):
    def edit(cols):
        cols["is_first"][17] = True

    add_episode(clean, 3 + EPISODES, LENGTH, edit=edit)
    (f,) = check_store(clean, checks=["alignment"]).findings
    assert str(f).startswith(f"steps run={RUN} episode={3 + EPISODES} step=17: "
                             "is_first set after the first step")


def test_is_last_and_is_terminal_flags(clean):
    def early_last(cols):
        cols["is_last"][30] = True  # before the end: an error wherever it is

    def no_last(cols):
        cols["is_last"][:] = False
        cols["is_terminal"][:] = False

    def terminal_without_last(cols):
        cols["is_terminal"][20] = True

    add_episode(clean, 10, LENGTH, edit=early_last)
    add_episode(clean, 11, LENGTH, edit=no_last, terminated=False)  # the row says it ended: no is_last
    add_episode(clean, 12, LENGTH, edit=no_last, terminated=False, partial_end=True)  # stopped early: fine
    add_episode(clean, 13, LENGTH, edit=terminal_without_last)
    add_episode(clean, 14, LENGTH, terminal=False, terminated=True)  # row and last step disagree
    got = {(f.episode_id, f.step): f.message for f in check_store(clean, checks=["alignment"]).findings}
    assert got == {
        (10, 30): "is_last set before the last step (the episode goes on to step 59)",
        (11, 59): "the last step lacks is_last, but the episodes row says the episode ended "
                  "(partial_end is false)",
        (13, 20): "is_terminal set on a step without is_last",
        (14, 59): "the episodes row says terminated, but the last step is not is_terminal",
    }


# ------------------------------------------------------------------ duplicates, references, gaps


def test_a_duplicated_step_row(clean):
    again = clean.read("steps", filter=(pc.field("episode_id") == 2) & (pc.field("step") == 17))
    clean.append("steps", again)  # the very same row, committed twice
    report = check_store(clean, checks=["duplicates", "references", "alignment"])
    (dup,) = found(report, "duplicates")
    assert where(dup) == ("error", "steps", RUN, 2, 17) and dup.message.startswith("2 rows")
    (ref,) = found(report, "references")
    assert ref.table == "episodes" and ref.episode_id == 2
    assert ref.message == f"num_steps is {LENGTH} but steps has {LENGTH + 1} rows for this episode"
    assert found(report, "alignment") == []


def test_duplicate_episode_and_run_rows(clean):
    clean.append("episodes", episode_row(1, LENGTH))
    clean.append("runs", clean.read("runs"))
    report = check_store(clean, checks=["duplicates"])
    got = {(f.table, f.run_id, f.episode_id): f.message for f in report.findings}
    assert got == {("episodes", RUN, 1): "2 rows in episodes for this episode",
                   ("runs", RUN, None): "2 rows in runs for this run_id"}


def test_missing_rows_and_ids(clean):
    add_episode(clean, 20, 5, row=False)  # steps, no episodes row (a killed recorder leaves this)
    clean.append("episodes", episode_row(21, 5))  # an episodes row, no steps
    add_episode(clean, 22, 5, run_id="ghost")  # a run with no runs row
    report = check_store(clean, checks=["references"])
    got = {(f.severity, f.table, f.run_id, f.episode_id, f.step): f.message for f in report.findings}
    assert got == {
        ("warning", "steps", RUN, 20, 0): "no row in episodes for this episode (5 steps)",
        ("warning", "episodes", RUN, 21, None): "no steps for this episode (its row says num_steps 5)",
        ("warning", "steps", "ghost", None, None): "run_id has rows in steps but no row in runs",
        ("warning", "episodes", "ghost", None, None): "run_id has rows in episodes but no row in runs",
    }
    assert report.ok  # warnings only


def test_gaps_in_step_numbering(clean):
    def hole(cols):
        keep = ~np.isin(np.arange(LENGTH), [5, 40, 41, 42])
        for k in ("step", "observation", "is_first", "is_last", "is_terminal"):
            cols[k] = cols[k][keep]
        for k in ("action", "reward", "discount"):
            cols[k] = [v for v, ok in zip(cols[k], keep, strict=True) if ok]

    add_episode(clean, 30, LENGTH, edit=hole)
    late = steps_of(31, 10)
    late["step"] = late["step"] + 3
    clean.append("steps", late)
    report = check_store(clean, checks=["gaps"])
    got = {(f.episode_id, f.step): f.message for f in report.findings}
    assert got == {(30, 5): "step 5 is missing (the episode goes on at step 6)",
                   (30, 40): "steps 40 to 42 are missing (the episode goes on at step 43)",
                   (31, 0): "steps 0 to 2 are missing: the episode starts at step 3"}


# ------------------------------------------------------------------ order and time


def test_steps_stored_out_of_order(clean):
    cols = steps_of(40, 20)
    half = {k: (v[10:] if isinstance(v, (np.ndarray, list)) else v) for k, v in cols.items()}
    first = {k: (v[:10] if isinstance(v, (np.ndarray, list)) else v) for k, v in cols.items()}
    clean.append("steps", half)  # steps 10..19 committed before steps 0..9
    clean.append("steps", first)
    clean.append("episodes", episode_row(40, 20))
    report = check_store(clean)
    (f,) = report.findings
    assert where(f) == ("warning", "steps", RUN, 40, 0) and f.check == "monotonic"
    assert f.message == "1 step(s) stored out of order: step 0 comes after step 19 in the files"


def test_scalar_wall_time_going_backwards(clean):
    # steps has no time column (schemas/steps.v1.json); scalars' wall_time is the store's timestamp
    clean.append("scalars", {"run_id": RUN, "scope": "train", "tag": "return", "step": np.arange(10),
                             "value": np.zeros(10),
                             "wall_time": 1.7e9 + np.array([0, 1, 2, 3, 4, 9, 6, 7, 8, 10.0])})
    (f,) = check_store(clean, checks=["monotonic"]).findings
    assert where(f) == ("warning", "scalars", RUN, None, 6)
    assert f.message.startswith("tag 'return': wall_time goes backwards 1 time(s)")


# ------------------------------------------------------------------ values


def test_nan_and_inf_in_rewards_and_observations(clean):
    def edit(cols):
        cols["reward"][7] = float("nan")
        cols["observation"][12, 3] = np.inf
        cols["action"][20] = np.array([0.0, np.nan], np.float32)

    add_episode(clean, 50, LENGTH, edit=edit)
    report = check_store(clean, checks=["nonfinite"])
    got = {(f.episode_id, f.step): f.message for f in report.findings}
    assert got == {(50, 7): "reward is nan",
                   (50, 12): "observation[3] is inf (1 of 4 elements not finite)",
                   (50, 20): "action[1] is nan (1 of 2 elements not finite)"}
    assert {f.severity for f in report.findings} == {"error"}


def test_binary_layout_dict_observations_in_a_second_layout(clean):
    """A run with other tensors (steps.2/): a struct of a list field and a binary-layout field."""
    n = 70
    rng = np.random.default_rng(0)
    img = rng.standard_normal((n, 4, 4)).astype(np.float32)
    img[5, 1, 2] = np.nan
    img[10:70] = img[10]  # 60 frozen observations (steps 10..69)...
    pos = rng.standard_normal((n, 3)).astype(np.float32)
    pos[10:70] = pos[10]  # ...in both fields
    img_binary = to_arrow(img, tensor_type("float32", (4, 4), layout="binary"))
    unknown = pa.array(np.arange(n) == 3)  # a null observation (an unknown final one) is no NaN
    obs = pa.StructArray.from_arrays([to_arrow(pos), img_binary], names=["pos", "img"], mask=unknown)
    cols = steps_of(0, n, run_id="pix")
    cols["observation"] = obs
    clean.add_run(source="test", run_id="pix")
    clean.append("steps", cols)
    clean.append("episodes", episode_row(0, n, run_id="pix"))
    assert len(clean.layouts("steps")) == 2
    assert isinstance(clean.schema("steps", layout=2).field("observation").type.field("img").type, TensorType)
    report = check_store(clean)
    got = {(f.check, f.run_id, f.episode_id, f.step): f.message for f in report.findings}
    assert got == {
        ("nonfinite", "pix", 0, 5): "observation.img[1, 2] is nan (1 of 16 elements not finite)",
        ("frozen", "pix", 0, 10): "the same observation for 60 consecutive steps (10 to 69; frozen_steps=50)",
        # the null observation is no NaN, but inside the episode it leaves a transition without its next
        ("null_observations", "pix", 0, 3): "the observation is null on 1 step(s) that are not the last "
        "(first: step 3): the transitions into them have no next observation; the source lost them (delete "
        "the episode, or import it again from a source that has them)",
    }


def test_frozen_observations(clean):
    def freeze(cols):
        cols["observation"][0:60] = cols["observation"][0]

    add_episode(clean, 60, 70, edit=freeze)
    report = check_store(clean, checks=["frozen"])
    (f,) = report.findings
    assert where(f) == ("warning", "steps", RUN, 60, 0) and "60 consecutive steps (0 to 59" in f.message
    assert check_store(clean, checks=["frozen"], frozen_steps=60).findings == []  # more than 60: none


def test_an_action_spike(clean):
    def spike(cols):
        cols["action"][33] = cols["action"][33] * np.float32([1, 1000])

    add_episode(clean, 70, LENGTH, edit=spike)
    report = check_store(clean, checks=["spikes"])
    (f,) = report.findings
    assert where(f) == ("warning", "steps", RUN, 70, 33) and f.message.startswith("action[1] = ")
    assert "spike_sigma=10" in f.message
    assert check_store(clean, checks=["spikes"], spike_sigma=1e6).findings == []


def test_short_episodes(clean):
    add_episode(clean, 80, 1)
    report = check_store(clean, checks=["short_episodes"])
    (f,) = report.findings
    assert where(f) == ("warning", "steps", RUN, 80, 0)
    assert f.message == ("the episode has 1 step(s), fewer than min_length=2 "
                         "(no action: it makes no transition)")
    assert check_store(clean, checks=["short_episodes"], min_length=1).findings == []
    assert len(check_store(clean, checks=["short_episodes"], min_length=LENGTH + 1).findings) == EPISODES + 1


# ------------------------------------------------------------------ replay memory


def test_memory_snapshots_whose_pointers_disagree_with_their_rows(clean):
    clean.append("memory", memory_rows(1, write_pointer=10))  # outside a buffer of 4 rows
    clean.append("memory", memory_rows(2, filled=np.ones(8, bool)))  # every row filled, pointer at 2
    clean.append("memory", memory_rows(3, is_full=True, filled=np.arange(8) != 5))  # full, one row unfilled
    report = check_store(clean, checks=["memory"])
    got = [(f.run_id, f.message) for f in report.findings]
    assert got == [
        (RUN, "snapshot 1: write_pointer 10 is outside the buffer (memory_size 4)"),
        (RUN, "snapshot 2: is_full is false and write_pointer is 2, but filled is true at memory_index 2, "
              "env_index 0 (4 row(s) whose filled flag the pointers contradict)"),
        (RUN, "snapshot 3: is_full is true and write_pointer is 2, but filled is false at memory_index 2, "
              "env_index 1 (1 row(s) whose filled flag the pointers contradict)"),
    ]
    assert all(f.severity == "error" and f.table == "memory" for f in report.findings)


def test_memory_rows_outside_the_buffer_and_duplicated(clean):
    rows = memory_rows(4)
    rows["memory_index"] = rows["memory_index"].copy()
    rows["memory_index"][-1] = 7
    clean.append("memory", rows)
    clean.append("memory", memory_rows(5))
    clean.append("memory", clean.read("memory", filter=pc.field("snapshot_id") == 5).slice(0, 1))
    report = check_store(clean, checks=["memory", "duplicates"])
    got = [(f.check, f.message) for f in report.findings]
    assert ("memory", "snapshot 4: 1 row(s) have a memory_index outside 0..memory_size - 1 = 3 "
                      "(first: 7)") in got
    assert ("duplicates", "snapshot 5: 1 (memory_index, env_index) pairs have more than one row "
                          "(first: memory_index 0, env_index 0)") in got


# ------------------------------------------------------------------ the report


def test_checks_are_chosen_by_name_and_skipped_when_their_tables_are_empty(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s")
    add_episode(st, 0, 3, row=False)
    report = check_store(st, checks=["gaps", "memory"])
    assert list(report.counts) == ["gaps"] and report.skipped == {"memory": "no rows in memory"}
    with pytest.raises(ArgumentError, match="unknown check.*'bogus'.*alignment"):
        check_store(st, checks=["bogus"])
    with pytest.raises(ArgumentError, match="min_length"):
        check_store(st, min_length=0)
    with pytest.raises(ArgumentError, match="memory_limit='lots'"):
        check_store(st, memory_limit="lots")
    limited = check_store(st, memory_limit="100MB")  # DuckDB spills past it; the same findings
    assert limited.findings == check_store(st).findings and limited.parameters["memory_limit"] == "100MB"
    assert CHECK_NAMES == tuple(CHECKS)  # the CLI's --only names are the registry's


def test_max_findings_keeps_the_first_and_counts_all(clean):
    def nans(cols):
        cols["reward"] = [float("nan")] * (LENGTH - 1) + [None]

    add_episode(clean, 90, LENGTH, edit=nans)
    report = check_store(clean, checks=["nonfinite"], max_findings=5)
    assert [f.step for f in report.findings] == [0, 1, 2, 3, 4]
    assert report.counts["nonfinite"]["errors"] == LENGTH - 1 and report.counts["nonfinite"]["listed"] == 5
    assert f"{LENGTH - 1 - 5} more not listed" in report.summary()
    data = json.loads(json.dumps(report.to_dict()))
    assert data["errors"] == LENGTH - 1 and len(data["findings"]) == 5 and data["ok"] is False
    assert data["parameters"] == {"min_length": 2, "frozen_steps": 50, "spike_sigma": 10.0,
                                  "checks": ["nonfinite"], "max_findings": 5, "memory_limit": None,
                                  "max_episode_steps": None, "layout": None}


# ------------------------------------------------------------------ rlarrow check


def run_check(*args: str):
    return CliRunner().invoke(check, [*args], catch_exceptions=False)


def test_cli_exit_status_follows_errors_and_warnings(clean, tmp_path):
    ok = run_check(str(clean.path))
    assert ok.exit_code == 0
    assert ok.stdout.strip() == f"{clean.path}: no problems found in {len(CHECKS)} checks"
    add_episode(clean, 80, 1)  # a warning only
    assert run_check(str(clean.path)).exit_code == 0
    assert run_check(str(clean.path), "--strict").exit_code == 1
    assert run_check(str(clean.path), "--min-length", "1", "--strict").exit_code == 0
    clean.append("steps", clean.read("steps", filter=(pc.field("episode_id") == 1) & (pc.field("step") == 3)))
    bad = run_check(str(clean.path), "--only", "duplicates,short_episodes", "--max-lines", "1")
    assert bad.exit_code == 1
    lines = bad.stdout.splitlines()
    assert lines[0] == f"steps run={RUN} episode=1 step=3: 2 rows for this (run_id, episode_id, step)"
    assert lines[1].startswith("... 1 more finding(s) not shown")
    assert lines[2] == (f"{clean.path}: 1 error, 1 warning in 2 checks "
                        "(duplicates: 1 error; short_episodes: 1 warning)")


def test_cli_usage_errors_exit_2(clean, tmp_path):
    shown = run_check("--help").output
    assert "\b" not in shown and "\n      rlarrow check runs.rlarrow\n" in shown  # examples kept as written
    assert all(name in shown for name in CHECK_NAMES)
    assert run_check(str(clean.path), "--only", "bogus").exit_code == 2
    assert run_check(str(clean.path), "--min-length", "0").exit_code == 2
    assert run_check(str(clean.path), "--spike-sigma", "0").exit_code == 2
    assert run_check(str(tmp_path / "missing")).exit_code == 2
    text = tmp_path / "notes.txt"
    text.write_text("not data")
    result = run_check(str(text))
    assert result.exit_code == 2 and "not a store" in result.output


def test_cli_json_report(clean, tmp_path):
    def edit(cols):
        cols["is_first"][17] = True

    add_episode(clean, 3 + EPISODES, LENGTH, edit=edit)
    out = tmp_path / "report.json"
    result = run_check(str(clean.path), "--json", "-o", str(out), "--frozen-steps", "20")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data == json.loads(out.read_text())
    assert set(data) == {"store", "ok", "errors", "warnings", "parameters", "checks", "skipped", "findings"}
    assert data["store"] == str(clean.path) and data["ok"] is False and data["errors"] == 1
    assert data["parameters"]["frozen_steps"] == 20 and data["parameters"]["checks"] == list(CHECKS)
    assert set(data["checks"]) == set(CHECKS)
    assert set(data["checks"]["alignment"]) == {"errors", "warnings", "listed", "seconds"}
    assert data["findings"] == [{"check": "alignment", "severity": "error", "table": "steps", "run_id": RUN,
                                 "episode_id": 3 + EPISODES, "step": 17,
                                 "message": "is_first set after the first step "
                                            "(the episode starts at step 0)"}]


def test_cli_checks_an_skrl_export_through_a_temporary_store(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    result = run_check(str(SKRL_NPZ), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["store"] == str(SKRL_NPZ) and data["ok"] is True
    assert data["skipped"] == {} and data["checks"]["memory"]["errors"] == 0
    assert any("episode" in line for line in data["converted"])
    assert "not a store; checking a temporary conversion" in result.stderr
    assert list(scratch.iterdir()) == []  # the temporary store is gone
    text = run_check(str(SKRL_NPZ))
    assert text.exit_code == 0 and text.stdout.splitlines()[-1].startswith(f"{SKRL_NPZ}: ")
    assert list(Path(scratch).iterdir()) == []


# ------------------------------------------------------------------ rlarrow check --fix


def rows_of(st: rlarrow.Store) -> dict[str, int]:
    return {t: st.row_count(t) for t in ("runs", "episodes", "steps", "scalars", "memory")}


def test_fix_adds_the_missing_runs_and_episodes_rows_in_one_commit(clean):
    ghost = add_episode(clean, 0, 5, run_id="ghost", row=False)  # a run with no runs row, no episodes row
    cut = add_episode(clean, 20, 6, terminal=False, row=False)  # ended without a terminal state

    def stopped(cols):  # the recording stopped in it: no is_last at all
        cols["is_last"][:] = False
        cols["is_terminal"][:] = False

    partial = add_episode(clean, 21, 7, edit=stopped, row=False)
    before, version = rows_of(clean), clean.version
    first = run_check(str(clean.path))
    assert first.exit_code == 0  # warnings only
    tip = f"4 of these (missing runs or episodes rows) can be added safely: rlarrow check {clean.path} --fix"
    assert tip in first.stdout.splitlines()

    result = run_check(str(clean.path), "--fix", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    st = rlarrow.Store.open(clean.path)
    assert st.version == version + 1  # one commit
    assert data["fix"] == {"added": {"runs": 1, "episodes": 3}, "version_before": version,
                           "version_after": version + 1}
    assert rows_of(st) == {**before, "runs": before["runs"] + 1, "episodes": before["episodes"] + 3}
    assert [(f["table"], f["run_id"], f["episode_id"]) for f in data["fixed"]] == [
        ("runs", "ghost", None), ("episodes", "ghost", 0), ("episodes", RUN, 20), ("episodes", RUN, 21)]
    assert data["ok"] is True and data["errors"] == data["warnings"] == 0 and data["findings"] == []
    assert data["hints"] == []

    (run,) = rlarrow.sql(st, "select * from runs where run_id = 'ghost'").to_pylist()
    assert run["source"] == FIX_SOURCE and json.loads(run["metadata"]) == {"added_by": FIX_SOURCE}
    query = "select * from episodes where (run_id, episode_id) in (('ghost', 0), ('r', 20), ('r', 21))"
    got = {r["episode_id"]: r for r in rlarrow.sql(st, query).to_pylist()}

    def reward_sum(cols):
        return pytest.approx(sum(r for r in cols["reward"] if r is not None))

    flags = ("num_steps", "terminated", "truncated", "partial_start", "partial_end", "env_index")
    assert {k: got[0][k] for k in flags} == {"num_steps": 5, "terminated": True, "truncated": False,
                                             "partial_start": False, "partial_end": False, "env_index": 0}
    assert {k: got[20][k] for k in flags} == {"num_steps": 6, "terminated": False, "truncated": True,
                                              "partial_start": False, "partial_end": False, "env_index": 0}
    assert {k: got[21][k] for k in flags} == {"num_steps": 7, "terminated": False, "truncated": False,
                                              "partial_start": False, "partial_end": True, "env_index": 0}
    assert got[0]["return"] == reward_sum(ghost) and got[20]["return"] == reward_sum(cut)
    assert got[21]["return"] == reward_sum(partial)
    assert all(json.loads(r["metadata"]) == {"added_by": FIX_SOURCE} for r in got.values())
    assert data["fixed"][2]["values"] == {"env_index": 0, "num_steps": 6, "return": reward_sum(cut),
                                          "terminated": False, "truncated": True, "partial_start": False,
                                          "partial_end": False}

    again = run_check(str(clean.path), "--fix")  # nothing left to fix: no commit
    assert again.exit_code == 0
    assert again.stdout.splitlines()[-1] == (
        f"{clean.path}: nothing to fix safely: the store is unchanged (version {version + 1}); "
        f"now: no problems found in {len(CHECKS)} checks")
    assert rlarrow.Store.open(clean.path).version == version + 1
    assert check_store(clean.path).findings == []


def test_fix_derives_partial_start_and_leaves_an_episode_of_several_envs(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s")
    st.add_run(source="test", run_id=RUN)

    def late(cols):  # a replay buffer that wrapped: the first step kept is not the episode's first
        cols["is_first"][:] = False

    def two_envs(cols):
        cols["env_index"] = np.arange(4) % 2

    add_episode(st, 0, 4, edit=late, row=False)
    add_episode(st, 1, 4, edit=two_envs, row=False)  # which env_index would its row have? a guess
    fix = fix_store(st, check_store(st, checks=["references"]), name="S")
    assert fix.added == {"episodes": 1} and fix.version_after == fix.version_before + 1
    (row,) = rlarrow.sql(st, "select * from episodes").to_pylist()
    assert (row["episode_id"], row["partial_start"], row["terminated"], row["partial_end"]) == \
        (0, True, True, False)
    (hint,) = fix.hints
    assert hint.check == "references" and "env_index differs between their steps" in hint.message
    assert hint.commands == ("rlarrow delete S --run r --episode 1",) and hint.label_commands == ()
    assert [f.episode_id for f in fix.remaining.findings] == [1]  # still no row: reported again
    with pytest.raises(StoreError, match="read-only"):
        fix_store(rlarrow.Store.open(st.path, readonly=True), fix.remaining)


def test_fix_deletes_nothing_and_names_the_commands_for_the_rest(clean):
    def nan(cols):
        cols["reward"][7] = float("nan")

    add_episode(clean, 50, LENGTH, edit=nan)
    before, version = rows_of(clean), clean.version
    result = run_check(str(clean.path), "--fix", "--json")
    assert result.exit_code == 1  # the NaN remains: an error
    data = json.loads(result.stdout)
    assert data["fix"]["added"] == {} and data["fixed"] == [] and data["errors"] == 1
    (hint,) = data["hints"]
    assert hint["check"] == "nonfinite"
    assert hint["message"].startswith("1 episode with NaN or infinity: not fixed")
    assert hint["commands"] == [f"rlarrow delete {clean.path} --run {RUN} --episode 50"]
    assert hint["label_commands"] == [
        f"rlarrow label {clean.path} --run {RUN} --episode 50 --set suspect=true"]
    assert rows_of(rlarrow.Store.open(clean.path)) == before and clean.version == version  # nothing deleted

    text = run_check(str(clean.path), "--fix").stdout.splitlines()
    at = text.index("not fixed automatically (nothing was deleted):")
    assert text[at + 2] == f"      rlarrow delete {clean.path} --run {RUN} --episode 50"


def test_fix_hints_group_episodes_by_run_a_few_lines_at_most(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s")
    keys = [("a", e) for e in range(25)] + [("b", 3), ("b", 4), ("c", 0)]
    for run in "abc":
        st.add_run(source="test", run_id=run)
    n = len(keys)
    st.append("steps", {"run_id": [r for r, _ in keys], "episode_id": [e for _, e in keys], "step": 0,
                        "env_index": 0, "observation": np.zeros((n, 2), np.float32),
                        "action": np.zeros((n, 1), np.float32), "reward": None, "is_first": True,
                        "is_last": True, "is_terminal": True})
    fix = fix_store(st, check_store(st, checks=["short_episodes"]), name="my store")
    assert fix.added == {} and fix.version_after == fix.version_before
    (hint,) = fix.hints
    assert hint.check == "short_episodes" and hint.message.startswith("28 episodes with fewer steps")
    def ids(first, end):
        return " ".join(f"--episode {e}" for e in range(first, end))

    assert hint.commands == (f"rlarrow delete 'my store' --run a {ids(0, 10)}",
                             f"rlarrow delete 'my store' --run a {ids(10, 20)}",
                             f"rlarrow delete 'my store' --run a {ids(20, 25)}",
                             "... (3 more episodes in 2 runs)")
    assert hint.label_commands[0] == f"rlarrow label 'my store' --run a {ids(0, 10)} --set suspect=true"
    assert hint.label_commands[-1] == "... (3 more episodes in 2 runs)"


def test_fix_of_a_converted_input_is_refused(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    result = run_check(str(SKRL_NPZ), "--fix")
    assert result.exit_code == 2
    assert "is not one" in result.output and "convert it first" in result.output
    assert list(scratch.iterdir()) == []  # refused before converting anything


# ------------------------------------------------------------------ what users of memory exports hit


def memory_store(tmp_path: Path, name: str, exports: list[Path], *, together: bool = True, **kw) -> Path:
    """A store of skrl-named exports converted with --episodes: in one convert, or one convert each."""
    from rlarrow.io.memory.importer import import_memory

    store = tmp_path / name
    for group in [exports] if together else [[e] for e in exports]:
        import_memory(group, store, run_id=RUN, episodes=True, progress=False, **kw)
    return store


def test_export_cuts_an_unrolling_per_export_left_and_a_missing_export(tmp_path):
    from test_unroll_series import export, play, skrl_name

    files = sorted(export(play(exports=5), tmp_path / "m").glob("*.npz"))
    assert found(check_store(memory_store(tmp_path, "joined", files)), "export_cuts") == []
    apart = found(check_store(memory_store(tmp_path, "apart", files, together=False)), "export_cuts")
    # each export unrolled alone: its inner edges cut episodes the next export continues
    assert len(apart) >= 8 and all(f.severity == "warning" and f.table == "episodes" for f in apart)
    assert any(f"partial_end at the end of export {skrl_name(1)}, but export {skrl_name(2)}" in f.message
               for f in apart), [f.message for f in apart]
    assert all("convert the exports together" in f.message for f in apart)
    gap = found(check_store(memory_store(tmp_path, "gap", files[:2] + files[3:])), "export_cuts")
    assert gap and all(f"missing between {skrl_name(1)} and {skrl_name(3)}" in f.message for f in gap)


def test_reset_rows_an_export_unrolled_alone_starts_with(tmp_path):
    from test_unroll_series import skrl_name

    from rlarrow.io.memory.npz import write_npz

    def tensors(states, rewards, done, nxt):
        col = lambda v, dt: np.asarray(v, dt).reshape(len(v), 1, 1)  # noqa: E731
        return {"observations": col(states, np.float32), "next_observations": col(nxt, np.float32),
                "actions": col([0] * len(states), np.int64), "rewards": col(rewards, np.float32),
                "terminated": col(done, bool), "truncated": col([0] * len(states), bool)}

    # an episode ends with the first export; the second begins with its autoreset row (state 4, reward 0)
    first = tensors([1, 2, 3], [1, 1, 1], [0, 0, 1], [2, 3, 4])
    second = tensors([4, 10, 11], [0, 1, 1], [0, 0, 1], [10, 11, 12])
    files = [write_npz(t, tmp_path / "m" / f"{skrl_name(i)}.npz") for i, t in enumerate([first, second])]
    apart = memory_store(tmp_path, "apart", files, together=False, autoreset="next-step")
    [finding] = found(check_store(apart), "reset_rows")
    assert (finding.episode_id, finding.step) == (1, 0) and "autoreset row of episode 0" in finding.message
    joined = memory_store(tmp_path, "joined", files, autoreset="next-step")
    assert found(check_store(joined), "reset_rows") == []


def test_time_limit_finds_episodes_joined_across_it(tmp_path):
    from test_unroll_series import export, play

    files = sorted(export(play(limit=6, exports=4), tmp_path / "m", drop=("truncated",)).glob("*.npz"))
    joined = memory_store(tmp_path, "joined", files)
    assert found(check_store(joined), "time_limit") == []  # no limit known: nothing to compare with
    long = found(check_store(joined, max_episode_steps=6), "time_limit")
    assert long and all("more than max_episode_steps=6" in f.message for f in long)
    assert any("--max-episode-steps 6" in f.message for f in long)
    result = run_check(str(joined), "--only", "time_limit", "--max-episode-steps", "6", "--strict")
    assert result.exit_code == 1 and "more than max_episode_steps=6" in result.stdout  # warnings, --strict
    cut = memory_store(tmp_path, "cut", files, max_episode_steps=6)
    # the limit recorded by the convert is used; only the first, partial episodes (whose start the
    # data does not show) can still be longer, and say so
    left = found(check_store(cut), "time_limit")
    assert all("first, partial episode" in f.message for f in left)
    assert len(left) < len(long)


def test_null_observations_inside_an_episode(clean):
    from rlarrow.core.tensors import with_null_rows

    def hole(cols):
        cols["observation"] = with_null_rows(to_arrow(cols["observation"]), np.arange(5) == 2)

    add_episode(clean, 10, 5, edit=hole)
    [finding] = found(check_store(clean), "null_observations")
    assert (finding.severity, finding.episode_id, finding.step) == ("error", 10, 2)
    assert "no next observation" in finding.message


def test_empty_imports_an_event_file_of_no_scalars(tmp_path):
    torch_tb = pytest.importorskip("torch.utils.tensorboard", reason="writing an event file needs torch")
    from rlarrow.io.importing import import_paths

    logs = tmp_path / "logs"
    writer = torch_tb.SummaryWriter(str(logs))
    writer.add_text("notes", "no scalars here")
    writer.close()
    import_paths([logs], tmp_path / "s", progress=False)
    [finding] = found(check_store(tmp_path / "s"), "empty_imports")
    assert finding.table == "sources" and "imported as 0 scalars" in finding.message
    st = rlarrow.Store.create(tmp_path / "ok")
    populate(st)
    assert found(check_store(st), "empty_imports") == []


@pytest.mark.parametrize("next_states", [True, False])
def test_interleaved_envs_of_a_csv_read_as_one_env(tmp_path, next_states):
    from test_unroll_series import play, skrl_name

    from rlarrow.io.memory.csv import write_csv
    from rlarrow.io.memory.importer import import_memory
    from rlarrow.io.memory.snapshot import MemorySnapshot

    tensors = play(envs=3, exports=1, memory_size=40).exports[0]
    if not next_states:
        tensors = {k: v for k, v in tensors.items() if k != "next_observations"}
    path = write_csv(MemorySnapshot(tensors), tmp_path / f"{skrl_name(0)}.csv")
    import_memory([path], tmp_path / "one", progress=False)  # num_envs not given: 1 is assumed
    [finding] = found(check_store(tmp_path / "one"), "interleaved")
    assert finding.severity == "error" and "look like 3 envs interleaved" in finding.message
    assert "--num-envs 3" in finding.message
    import_memory([path], tmp_path / "three", progress=False, num_envs=3)
    assert found(check_store(tmp_path / "three"), "interleaved") == []
    if next_states:  # `rlarrow check` of the csv itself: its memory is checked, no episodes guessed
        result = run_check(str(path), "--only", "interleaved")
        assert result.exit_code == 1 and "--num-envs 3" in result.stdout, result.output


def test_layout_narrows_the_tensor_checks_to_one_steps_layout(tmp_path):
    """A store of PPO-like (float) and DQN-like (int) episodes: --layout N checks one layout's tensors."""
    st = rlarrow.Store.create(tmp_path / "s")
    nan_obs = np.zeros((4, 2), np.float32)
    nan_obs[1, 0] = np.nan  # a NaN in the float run's observations
    for run, action, obs in (("ppo", [0.5, -0.5, 0.25, None], nan_obs),
                             ("dqn", [1, 0, 1, None], np.zeros((4, 2), np.float32))):
        st.append("steps", {"run_id": run, "episode_id": 0, "step": np.arange(4), "env_index": 0,
                            "observation": obs, "action": action, "reward": [1.0, 1.0, 1.0, None],
                            "is_first": [True, False, False, False], "is_last": [False, False, False, True],
                            "is_terminal": [False, False, False, True]})
    assert [list(info.run_ids) for info in st.layouts("steps")] == [["ppo"], ["dqn"]]
    every = check_store(st)
    assert any(f.run_id == "ppo" and f.check == "nonfinite" for f in every.findings)
    only_dqn = check_store(st, layout=2)
    assert not any(f.check == "nonfinite" for f in only_dqn.findings)  # the float layout was not read
    assert only_dqn.parameters["layout"] == 2
    with pytest.raises(ArgumentError, match="no layout 3; it has 1, 2"):
        check_store(st, layout=3)
    out = CliRunner().invoke(check, [str(tmp_path / "s"), "--layout", "1", "--json"])
    assert "nonfinite" in out.output


def test_the_fix_commits_through_the_write_side_all_or_nothing(tmp_path):
    """``add_rows`` (the store's write side) commits every piece or none; the doctor itself never writes."""
    import ast

    from rlarrow.core.store.additions import add_rows

    st = rlarrow.Store.create(tmp_path / "s")
    rows = rlarrow.core.schema.build("scalars", {"run_id": "r", "scope": "t", "tag": "x", "step": [0, 1],
                                                 "value": [1.0, 2.0]})

    def broken():
        yield "scalars", rows
        raise OSError("the disk went away after the first piece")

    with pytest.raises(OSError, match="went away"):
        add_rows(st, broken())
    assert st.version == 0 and st.row_count("scalars") == 0  # the first piece was not committed
    assert add_rows(st, iter([("scalars", rows), ("scalars", rows.slice(0, 0))])) == {"scalars": 2}
    assert st.version == 1 and st.row_count("scalars") == 2
    with pytest.raises(StoreError, match="cannot fix a store opened read-only"):
        add_rows(rlarrow.Store.open(st.path, readonly=True), iter([("scalars", rows)]), what="fix")
    # the read side calls no store method that commits
    writes = {"append", "append_together", "transaction", "add_run", "writer", "delete", "label", "merge"}
    doctor = Path(rlarrow.query.doctor.__file__).parent
    called = {(node.func.value.id, node.func.attr) for path in doctor.glob("*.py")
              for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name)}
    assert {attr for name, attr in called if name in ("st", "store")} & writes == set()
    assert ("st", "row_count") in called  # (what the walk sees: the store's reads)


@pytest.mark.parametrize("name", ["rlarrow.query.doctor", *(f"rlarrow.query.doctor.{m}" for m in (
    "findings", "context", "checks", "episode_checks", "tensor_checks", "memory_checks", "fixes", "hints"))])
def test_each_doctor_module_says_what_it_owns_and_its_examples_run(name, tmp_path, monkeypatch):
    import doctest
    import importlib

    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    assert module.__doc__ and len(module.__doc__.split()) > 10, f"{name} has no docstring"
    assert len(Path(module.__file__).read_text().splitlines()) <= 800
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted and result.failed == 0
