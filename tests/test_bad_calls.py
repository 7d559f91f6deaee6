# ruff: noqa: E501  (a table: one call a line)
"""A table of bad calls: every misuse of the API and the CLI ends in an rlarrow error naming the argument.

Each API case is (what is called, the error type, a word the message must hold: the
argument's name, or the file and field of a malformed input). Each CLI case runs the real
command (in process, through click) and asserts exit status 1 or 2, the option named, and
no traceback. Inputs with a malformed ``features.json`` (RLDS) or ``info.json`` (LeRobot)
are made here from the committed fixtures.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import rlarrow
from rlarrow.core.errors import (
    ArgumentError,
    ArgumentTypeError,
    InvalidInputError,
    NotFoundError,
    RLArrowError,
    SchemaMismatchError,
    StoreError,
)
from tests.conftest import FIXTURES, populate

NAN = float("nan")


class Ctx:
    store: rlarrow.Store
    run: str
    tmp: Path


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Ctx:
    c = Ctx()
    c.tmp = tmp_path_factory.mktemp("bad_calls")
    c.store = rlarrow.Store.create(c.tmp / "store")
    c.run = populate(c.store)
    return c


def _rlds(c: Ctx, edit: Callable[[dict[str, Any]], None], name: str) -> Path:
    """A copy of the committed RLDS fixture whose features.json ``edit`` changed."""
    target = c.tmp / f"rlds_{name}"
    if not target.exists():
        shutil.copytree(FIXTURES / "rlds" / "catch", target)
        spec = json.loads((target / "features.json").read_text())
        edit(spec)
        (target / "features.json").write_text(json.dumps(spec))
    return target


def _steps_feature(spec: dict[str, Any], name: str) -> dict[str, Any]:
    return spec["featuresDict"]["features"]["steps"]["sequence"]["feature"]["featuresDict"]["features"][name]


def _set(path: list[str | int], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        node: Any = spec
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


def _obs(**tensor: Any) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        _steps_feature(spec, "observation")["tensor"].update(tensor)
    return edit


_FEATURES = ["featuresDict", "features"]
_STEPS = [*_FEATURES, "steps", "sequence", "feature", "featuresDict", "features"]

RLDS_SHAPES: dict[str, Callable[[dict[str, Any]], None]] = {
    "features_a_list": lambda spec: spec.update(featuresDict=[]),
    "features_text": _set(_FEATURES, "x"),
    "steps_null": _set([*_FEATURES, "steps"], None),
    "sequence_a_number": _set([*_FEATURES, "steps", "sequence"], 3),
    "tensor_a_list": _set([*_STEPS, "observation", "tensor"], [1]),
    "dtype_unknown": _obs(dtype="float33"),
    "dtype_a_number": _obs(dtype=7),
    "shape_text": _obs(shape="10x5"),
    "dimension_text": _obs(shape={"dimensions": ["ten", "5"]}),
    "dimension_negative_2": _obs(shape={"dimensions": ["-2", "5"]}),
    "dimensions_a_dict": _obs(shape={"dimensions": {"a": 1}}),
    "encoding_unknown": _obs(encoding="lz77"),
}


def _lerobot(c: Ctx, edit: Callable[[dict[str, Any]], None], name: str) -> Path:
    """A copy of the committed LeRobot v3.0 fixture whose meta/info.json ``edit`` changed."""
    target = c.tmp / f"lerobot_{name}"
    if not target.exists():
        shutil.copytree(FIXTURES / "lerobot" / "pusht_v30", target)
        info_path = target / "meta" / "info.json"
        info = json.loads(info_path.read_text())
        edit(info)
        info_path.write_text(json.dumps(info))
    return target


def _feature(key: str, **values: Any) -> Callable[[dict[str, Any]], None]:
    def edit(info: dict[str, Any]) -> None:
        info["features"][key].update(values)
    return edit


LEROBOT_INFOS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "fps_text": (_set(["fps"], "ten"), "fps"),
    "fps_zero": (_set(["fps"], 0), "fps"),
    "fps_negative": (_set(["fps"], -10), "fps"),
    "fps_nan": (_set(["fps"], NAN), "fps"),
    "fps_list": (_set(["fps"], [10]), "fps"),
    "dtype_float33": (_feature("action", dtype="float33"), "float33"),
    "dtype_a_number": (_feature("action", dtype=3), "dtype"),
    "shape_negative": (_feature("action", shape=[-2]), "shape"),
    "shape_text": (_feature("action", shape="2"), "shape"),
    "features_a_list": (_set(["features"], []), "features"),
}


def _import_rlds(c: Ctx, name: str) -> Any:
    from rlarrow.io.rlds import import_rlds
    path = _rlds(c, RLDS_SHAPES[name], name)
    return import_rlds(path, rlarrow.Store.create(c.tmp / f"into_rlds_{name}"))


def _import_lerobot(c: Ctx, name: str) -> Any:
    from rlarrow.io.lerobot import import_lerobot
    path = _lerobot(c, LEROBOT_INFOS[name][0], name)
    return import_lerobot(path, rlarrow.Store.create(c.tmp / f"into_lerobot_{name}"))


def _torch(**kw: Any) -> Callable[[Ctx], Any]:
    def call(c: Ctx) -> Any:
        torch_module = pytest.importorskip("rlarrow.train.torch")
        return torch_module.StreamingDataset(c.store, **kw)
    return call


def _export(module: str, function: str, **kw: Any) -> Callable[[Ctx], Any]:
    def call(c: Ctx) -> Any:
        import importlib
        fn = getattr(importlib.import_module(module), function)
        return fn(c.store, c.tmp / f"out_{function}_{len(kw)}_{sorted(kw)}", run_id=c.run, **kw)
    return call


def _q(name: str) -> Any:
    import importlib
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


API: list[tuple[str, Callable[[Ctx], Any], type[Exception], str]] = [
    # the store: ids, tables, columns, versions, numbers
    ("delete_runs_int", lambda c: c.store.delete(runs=5), ArgumentTypeError, "runs"),
    ("delete_runs_ints", lambda c: c.store.delete(runs=[1, 2]), ArgumentTypeError, "runs"),
    ("delete_runs_empty_id", lambda c: c.store.delete(runs=[""]), ArgumentError, "runs"),
    ("delete_runs_bytes", lambda c: c.store.delete(runs=b"r0"), ArgumentTypeError, "runs"),
    ("delete_nothing", lambda c: c.store.delete(), ArgumentError, "runs"),
    ("delete_episodes_text", lambda c: c.store.delete(episodes="r0"), ArgumentTypeError, "episodes"),
    ("delete_episodes_single", lambda c: c.store.delete(episodes=[("r0",)]), ArgumentError, "episodes"),
    ("delete_episodes_id_text", lambda c: c.store.delete(episodes=[("r0", "x")]), ArgumentTypeError, "episodes"),
    ("delete_episodes_int", lambda c: c.store.delete(episodes=3), ArgumentTypeError, "episodes"),
    ("label_metadata_text", lambda c: c.store.label("x", runs=[c.run]), ArgumentError, "metadata"),
    ("label_runs_int", lambda c: c.store.label({"a": 1}, runs=7), ArgumentTypeError, "runs"),
    ("read_unknown_table", lambda c: c.store.read("stepz"), NotFoundError, "stepz"),
    ("read_table_int", lambda c: c.store.read(5), ArgumentTypeError, "table"),
    ("read_columns_unknown", lambda c: c.store.read("steps", columns=["rewardz"]), NotFoundError, "rewardz"),
    ("read_columns_int", lambda c: c.store.read("steps", columns=[1]), ArgumentTypeError, "columns"),
    ("read_columns_number", lambda c: c.store.read("steps", columns=3), ArgumentTypeError, "columns"),
    ("read_layout_99", lambda c: c.store.read("steps", layout=99), StoreError, "layout"),
    ("read_layout_text", lambda c: c.store.read("steps", layout="1"), ArgumentTypeError, "layout"),
    ("files_unknown_table", lambda c: c.store.files("stepz"), NotFoundError, "stepz"),
    ("row_count_unknown_table", lambda c: c.store.row_count("nope"), NotFoundError, "nope"),
    ("layouts_unknown_table", lambda c: c.store.layouts("nope"), NotFoundError, "nope"),
    ("append_text_data", lambda c: c.store.append("scalars", "x"), ArgumentTypeError, "data"),
    ("append_list_data", lambda c: c.store.append("scalars", [1, 2]), ArgumentTypeError, "data"),
    ("append_unknown_table", lambda c: c.store.append("nope", {"run_id": "r"}), NotFoundError, "nope"),
    ("append_threads_negative", lambda c: c.store.append("scalars", {"run_id": "r"}, threads=-1),
     ArgumentError, "threads"),
    ("writer_unknown_table", lambda c: c.store.writer("nope"), NotFoundError, "nope"),
    ("vacuum_nan", lambda c: c.store.vacuum(retain_hours=NAN), ArgumentError, "retain_hours"),
    ("vacuum_negative", lambda c: c.store.vacuum(retain_hours=-1), ArgumentError, "retain_hours"),
    ("vacuum_text", lambda c: c.store.vacuum(retain_hours="1"), ArgumentTypeError, "retain_hours"),
    ("vacuum_inf", lambda c: c.store.vacuum(retain_hours=math.inf), ArgumentError, "retain_hours"),
    ("compact_unknown_table", lambda c: c.store.compact("nope"), NotFoundError, "nope"),
    ("compact_table_int", lambda c: c.store.compact(5), ArgumentTypeError, "table"),
    ("check_unknown_table", lambda c: c.store.check("nope"), NotFoundError, "nope"),
    ("open_version_negative", lambda c: rlarrow.Store.open(c.store.path, version=-1), ArgumentError, "version"),
    ("open_version_text", lambda c: rlarrow.Store.open(c.store.path, version="1"), ArgumentTypeError, "version"),
    ("open_version_float", lambda c: rlarrow.Store.open(c.store.path, version=1.5), ArgumentTypeError, "version"),
    ("open_version_future", lambda c: rlarrow.Store.open(c.store.path, version=10**6), NotFoundError, "version"),
    ("open_empty_path", lambda c: rlarrow.Store.open(""), ArgumentError, "path"),
    ("add_run_metadata_text", lambda c: c.store.add_run(source="x", name=5), SchemaMismatchError, "name"),
    ("add_run_empty_id", lambda c: c.store.add_run(run_id="", source="x"), ArgumentError, "run_id"),
    ("add_run_id_int", lambda c: c.store.add_run(run_id=5, source="x"), ArgumentTypeError, "run_id"),
    ("has_run_int", lambda c: c.store.has_run(5), ArgumentTypeError, "run_id"),
    ("merge_int", lambda c: c.store.merge(5), ArgumentTypeError, "other"),
    # SQL, scan, episodes, statistics, plots, checks
    ("sql_query_int", lambda c: rlarrow.sql(c.store, 5), ArgumentTypeError, "query"),
    ("sql_query_empty", lambda c: rlarrow.sql(c.store, ""), ArgumentError, "query"),
    ("sql_output_unknown", lambda c: rlarrow.sql(c.store, "select 1", output="xml"), ArgumentError, "output"),
    ("sql_version_negative", lambda c: rlarrow.sql(c.store, "select 1", version=-1), ArgumentError, "version"),
    ("sql_params_text", lambda c: rlarrow.sql(c.store, "select ?", params="ab"), ArgumentTypeError, "params"),
    ("scan_unknown_table", lambda c: rlarrow.scan(c.store, "nope"), NotFoundError, "nope"),
    ("scan_layout_99", lambda c: rlarrow.scan(c.store, "steps", layout=99), StoreError, "layout"),
    ("connect_version_text", lambda c: rlarrow.connect(c.store, version="2"), ArgumentTypeError, "version"),
    ("connect_layout_text", lambda c: rlarrow.connect(c.store, layout="x"), ArgumentError, "layout"),
    ("export_format_unknown", lambda c: _q("rlarrow.query.connection.export")(
        c.store, "select 1", c.tmp / "x.xml", format="xml"), ArgumentError, "format"),
    ("iter_episodes_batch_zero", lambda c: list(_q("rlarrow.query.connection.iter_episodes")(
        c.store, batch_episodes=0)), ArgumentError, "batch_episodes"),
    ("iter_episodes_columns_int", lambda c: list(_q("rlarrow.query.connection.iter_episodes")(
        c.store, columns=5)), ArgumentTypeError, "columns"),
    ("reader_run_unknown", lambda c: rlarrow.Reader(c.store, run_id="nope"), StoreError, "nope"),
    ("stats_runs_int", lambda c: _q("rlarrow.query.dataset_stats.stats")(c.store, runs=[5]),
     ArgumentTypeError, "runs"),
    ("stats_columns_int", lambda c: _q("rlarrow.query.dataset_stats.stats")(c.store, columns=5),
     ArgumentTypeError, "columns"),
    ("stats_weight_nan", lambda c: _q("rlarrow.query.dataset_stats.stats")(c.store, weights={c.run: NAN}),
     ArgumentError, "weights"),
    ("stats_weight_negative", lambda c: _q("rlarrow.query.dataset_stats.stats")(c.store, weights={c.run: -1}),
     ArgumentError, "weights"),
    ("plot_tags_int", lambda c: _q("rlarrow.query.plot.plot_scalars")(c.store, 5), ArgumentTypeError, "tags"),
    ("plot_smooth_negative", lambda c: _q("rlarrow.query.plot.plot_scalars")(c.store, "train/loss", smooth=-1),
     ArgumentError, "smooth"),
    ("check_checks_unknown", lambda c: _q("rlarrow.query.doctor.check_store")(c.store, checks=["nope"]),
     ArgumentError, "nope"),
    ("check_min_length_negative", lambda c: _q("rlarrow.query.doctor.check_store")(c.store, min_length=-1),
     ArgumentError, "min_length"),
    ("check_spike_sigma_nan", lambda c: _q("rlarrow.query.doctor.check_store")(c.store, spike_sigma=NAN),
     ArgumentError, "spike_sigma"),
    ("check_max_findings_zero", lambda c: _q("rlarrow.query.doctor.check_store")(c.store, max_findings=-1),
     ArgumentError, "max_findings"),
    # training loaders
    ("stream_batch_size_zero", _torch(batch_size=0), ArgumentError, "batch_size"),
    ("stream_batch_size_negative", _torch(batch_size=-4), ArgumentError, "batch_size"),
    ("stream_batch_size_float", _torch(batch_size=1.5), ArgumentTypeError, "batch_size"),
    ("stream_unknown_table", _torch(table="nope"), NotFoundError, "nope"),
    ("stream_columns_unknown", _torch(columns=["rewardz"]), NotFoundError, "rewardz"),
    ("stream_columns_int", _torch(columns=5), ArgumentTypeError, "columns"),
    ("stream_sequence_length_zero", _torch(sequence_length=0), ArgumentError, "sequence_length"),
    ("stream_buffer_rows_zero", _torch(buffer_rows=0), ArgumentError, "buffer_rows"),
    ("stream_world_size_zero", _torch(rank=0, world_size=0), ArgumentError, "world_size"),
    ("stream_rank_too_big", _torch(rank=2, world_size=2), ArgumentError, "rank"),
    ("stream_normalize_unknown", _torch(normalize="sideways"), ArgumentError, "sideways"),
    ("stream_fps_nan", _torch(delta_timestamps={"reward": [0.0]}, fps=NAN), ArgumentError, "fps"),
    ("stream_delta_steps_int", _torch(delta_steps={"reward": 1}), ArgumentTypeError, "delta_steps"),
    # recorders
    ("summary_writer_flush_nan", lambda c: rlarrow.SummaryWriter(c.store, flush_secs=NAN),
     ArgumentError, "flush_secs"),
    ("memory_size_zero", lambda c: _q("rlarrow.record.replay.Memory")(memory_size=0),
     ArgumentError, "memory_size"),
    ("memory_num_envs_zero", lambda c: _q("rlarrow.record.replay.Memory")(memory_size=4, num_envs=0),
     ArgumentError, "num_envs"),
    ("memory_export_format_unknown", lambda c: _q("rlarrow.record.replay.Memory")(
        memory_size=4, export_format="xml"), ArgumentError, "export_format"),
    # import and export
    ("import_paths_empty", lambda c: _q("rlarrow.io.importing.import_paths")([], c.tmp / "s_empty"),
     ArgumentError, "inputs"),
    ("import_paths_num_envs_zero", lambda c: _q("rlarrow.io.importing.import_paths")(
        [FIXTURES / "skrl"], c.tmp / "s_ne", num_envs=0), ArgumentError, "num_envs"),
    ("import_paths_dtype_unknown", lambda c: _q("rlarrow.io.importing.import_paths")(
        [FIXTURES / "skrl"], c.tmp / "s_dt", dtype="float33"), ArgumentError, "dtype"),
    ("import_paths_layout_unknown", lambda c: _q("rlarrow.io.importing.import_paths")(
        [FIXTURES / "skrl"], c.tmp / "s_lay", layout="sideways"), ArgumentError, "layout"),
    ("import_rlds_images_unknown", lambda c: _q("rlarrow.io.rlds.import_rlds")(
        FIXTURES / "rlds" / "catch", c.tmp / "s_img", images="sideways"), ArgumentError, "images"),
    ("import_rlds_splits_int", lambda c: _q("rlarrow.io.rlds.import_rlds")(
        FIXTURES / "rlds" / "catch", c.tmp / "s_spl", splits=5), ArgumentTypeError, "splits"),
    ("import_lerobot_video_unknown", lambda c: _q("rlarrow.io.lerobot.import_lerobot")(
        FIXTURES / "lerobot" / "pusht_v30", c.tmp / "s_vid", video="sideways"), ArgumentError, "video"),
    ("import_tfevents_on_corrupt_unknown", lambda c: _q("rlarrow.io.tfevents.import_tfevents")(
        FIXTURES / "tfevents", c.tmp / "s_tf", on_corrupt="shrug"), ArgumentError, "on_corrupt"),
    ("export_lerobot_codebase", _export("rlarrow.io.lerobot", "export_lerobot", codebase="v9"),
     ArgumentError, "codebase"),
    ("export_lerobot_fps_zero", _export("rlarrow.io.lerobot", "export_lerobot", fps=0), ArgumentError, "fps"),
    ("export_lerobot_fps_nan", _export("rlarrow.io.lerobot", "export_lerobot", fps=NAN), ArgumentError, "fps"),
    ("export_lerobot_images", _export("rlarrow.io.lerobot", "export_lerobot", images="jpeg"),
     ArgumentError, "images"),
    ("export_rlds_per_shard_zero", _export("rlarrow.io.rlds", "export_rlds", episodes_per_shard=0),
     ArgumentError, "episodes_per_shard"),
    ("export_minari_data_format", _export("rlarrow.io.minari", "export_minari", data_format="xml"),
     ArgumentError, "data_format"),
    *[(f"rlds_features_{name}", (lambda n: lambda c: _import_rlds(c, n))(name), InvalidInputError, "features.json")
      for name in RLDS_SHAPES],
    *[(f"lerobot_info_{name}", (lambda n: lambda c: _import_lerobot(c, n))(name), InvalidInputError, needle)
      for name, (_, needle) in LEROBOT_INFOS.items()],
]


@pytest.mark.parametrize(("call", "error", "needle"), [case[1:] for case in API], ids=[case[0] for case in API])
def test_api_misuse_is_an_rlarrow_error_naming_the_argument(ctx: Ctx, call: Callable[[Ctx], Any],
                                                           error: type[Exception], needle: str) -> None:
    with pytest.raises(RLArrowError) as info:
        call(ctx)
    assert isinstance(info.value, error), f"{type(info.value).__name__}: {info.value}"
    assert needle in str(info.value), str(info.value)
    assert not str(info.value).startswith("unexpected")


def test_the_table_is_as_long_as_the_issue_asks() -> None:
    assert len(API) >= 60 and len(CLI) >= 60


# ---------------------------------------------------------------------------------------------------
# a bare string is one id, never a list of its characters


def _two_runs(tmp: Path) -> tuple[rlarrow.Store, list[str]]:
    store = rlarrow.Store.create(tmp / "two")
    runs = [store.add_run(run_id=r, source="test") for r in ("r0", "r")]
    for r in runs:
        store.append("scalars", {"run_id": r, "scope": "train", "tag": "loss", "step": np.arange(3),
                                 "value": np.ones(3), "wall_time": 1.7e9, "encoding": "simple_value",
                                 "dtype": "float32"})
    return store, runs


def test_delete_a_bare_run_id_deletes_that_run(tmp_path: Path) -> None:
    store, _ = _two_runs(tmp_path)
    store.add_run(run_id="0", source="test")
    counts = store.delete(runs="r0")
    assert counts["scalars"] == 3
    assert sorted(store.read("runs", columns="run_id").column("run_id").to_pylist()) == ["0", "r"]


def test_label_a_bare_run_id_labels_that_run(tmp_path: Path) -> None:
    store, _ = _two_runs(tmp_path)
    assert store.label({"split": "val"}, runs="r0") == {"runs": 1}
    got = rlarrow.sql(store, "select run_id, metadata->>'$.split' as s from runs order by run_id").to_pylist()
    assert got == [{"run_id": "r", "s": None}, {"run_id": "r0", "s": "val"}]


def test_a_bare_column_or_table_is_one(tmp_path: Path) -> None:
    store, _ = _two_runs(tmp_path)
    assert store.read("scalars", columns="value").column_names == ["value"]
    assert store.check("scalars") == []
    assert set(store.compact("scalars")) <= {"scalars"}


# ---------------------------------------------------------------------------------------------------
# the command line


CLI: list[tuple[str, list[str], str]] = []


def _cli_cases() -> list[tuple[str, list[str], str]]:
    """(id, arguments with {S} for the store, {T} for a scratch dir, {R} a run; what the message names)."""
    cases = [
        ("info_runs_negative", ["info", "{S}", "--runs", "-1"], "--runs"),
        ("info_runs_text", ["info", "{S}", "--runs", "many"], "--runs"),
        ("info_no_store", ["info", "{T}/nope"], "nope"),
        ("repair_no_store", ["repair", "{T}/nope"], "nope"),
        ("migrate_no_store", ["migrate", "{T}/nope"], "nope"),
        ("compact_unknown_table", ["compact", "{S}", "--table", "nope"], "nope"),
        ("compact_empty_table", ["compact", "{S}", "--table", ""], "--table"),
        ("history_no_store", ["history", "{T}/nope"], "nope"),
        ("vacuum_nan", ["vacuum", "{S}", "--retain-hours", "nan"], "--retain-hours"),
        ("vacuum_inf", ["vacuum", "{S}", "--retain-hours", "inf"], "--retain-hours"),
        ("vacuum_negative", ["vacuum", "{S}", "--retain-hours", "-1"], "--retain-hours"),
        ("vacuum_text", ["vacuum", "{S}", "--retain-hours", "week"], "--retain-hours"),
        ("delete_nothing", ["delete", "{S}"], "--run"),
        ("delete_unknown_run", ["delete", "{S}", "--run", "nope"], "nope"),
        ("delete_empty_run", ["delete", "{S}", "--run", ""], "--run"),
        ("delete_episode_text", ["delete", "{S}", "--run", "{R}", "--episode", "x"], "--episode"),
        ("delete_episode_two_runs", ["delete", "{S}", "--run", "a", "--run", "b", "--episode", "1"], "--episode"),
        ("label_no_set", ["label", "{S}", "--run", "{R}"], "--set"),
        ("label_set_no_eq", ["label", "{S}", "--run", "{R}", "--set", "split"], "--set"),
        ("label_set_empty_key", ["label", "{S}", "--run", "{R}", "--set", "=x"], "--set"),
        ("label_unknown_run", ["label", "{S}", "--run", "nope", "--set", "a=1"], "nope"),
        ("label_nothing", ["label", "{S}", "--set", "a=1"], "--run"),
        ("merge_no_other", ["merge", "{S}"], "OTHERS"),
        ("merge_not_a_store", ["merge", "{S}", "{T}"], "store"),
        ("convert_no_input", ["convert", "-o", "{T}/c1"], "INPUTS"),
        ("convert_missing_input", ["convert", "{T}/nope", "-o", "{T}/c2"], "nope"),
        ("convert_num_envs_zero", ["convert", "{F}/skrl", "-o", "{T}/c3", "--num-envs", "0"], "--num-envs"),
        ("convert_memory_size_text", ["convert", "{F}/skrl", "-o", "{T}/c4", "--memory-size", "x"],
         "--memory-size"),
        ("convert_layout_unknown", ["convert", "{F}/skrl", "-o", "{T}/c5", "--layout", "x"], "--layout"),
        ("convert_autoreset_unknown", ["convert", "{F}/skrl", "-o", "{T}/c6", "--autoreset", "x"], "--autoreset"),
        ("convert_names_bad", ["convert", "{F}/skrl", "-o", "{T}/c7", "--names", "states"], "--names"),
        ("convert_max_steps_zero", ["convert", "{F}/skrl", "-o", "{T}/c8", "--max-episode-steps", "0"],
         "--max-episode-steps"),
        ("convert_no_output", ["convert", "{F}/skrl"], "--output"),
        ("convert_empty_run_id", ["convert", "{F}/skrl", "-o", "{T}/c9", "--run-id", ""], "--run-id"),
        ("export_format_unknown", ["export", "{S}", "-o", "{T}/e1", "--format", "xml"], "--format"),
        ("export_no_output", ["export", "{S}", "--format", "npz"], "--output"),
        ("export_fps_zero", ["export", "{S}", "-o", "{T}/e2", "--format", "lerobot", "--fps", "0"], "--fps"),
        ("export_fps_text", ["export", "{S}", "-o", "{T}/e3", "--format", "lerobot", "--fps", "ten"], "--fps"),
        ("export_codebase_unknown", ["export", "{S}", "-o", "{T}/e4", "--format", "lerobot", "--codebase", "v9"],
         "--codebase"),
        ("export_unknown_run", ["export", "{S}", "-o", "{T}/e5", "--format", "lerobot", "--run-id", "nope"],
         "nope"),
        ("export_images_unknown", ["export", "{S}", "-o", "{T}/e6", "--format", "lerobot", "--images", "gif"],
         "--images"),
        ("export_data_format_unknown", ["export", "{S}", "-o", "{T}/e7", "--format", "minari",
                                        "--data-format", "xml"], "--data-format"),
        ("sql_format_unknown", ["sql", "{S}", "select 1", "--format", "xml"], "--format"),
        ("sql_max_rows_negative", ["sql", "{S}", "select 1", "--max-rows", "-1"], "--max-rows"),
        ("sql_version_negative", ["sql", "{S}", "select 1", "--version", "-1"], "--version"),
        ("sql_version_future", ["sql", "{S}", "select 1", "--version", "999999"], "999999"),
        ("sql_layout_text", ["sql", "{S}", "select 1", "--layout", "x"], "--layout"),
        ("sql_tensor_bad", ["sql", "{S}", "select 1", "--tensor", "x"], "--tensor"),
        ("sql_empty_query", ["sql", "{S}", ""], "QUERY"),
        ("sql_unknown_table", ["sql", "{S}", "select * from nope"], "nope"),
        ("plot_no_output", ["plot", "{S}", "--tag", "train/loss"], "--output"),
        ("plot_smooth_negative", ["plot", "{S}", "--tag", "train/loss", "--smooth", "-1", "-o", "{T}/p.png"],
         "--smooth"),
        ("plot_unknown_tag", ["plot", "{S}", "--tag", "nope", "-o", "{T}/p2.png"], "nope"),
        ("plot_unknown_run", ["plot", "{S}", "--tag", "train/loss", "--run", "nope", "-o", "{T}/p3.png"], "nope"),
        ("check_min_length_zero", ["check", "{S}", "--min-length", "0"], "--min-length"),
        ("check_spike_sigma_nan", ["check", "{S}", "--spike-sigma", "nan"], "--spike-sigma"),
        ("check_spike_sigma_zero", ["check", "{S}", "--spike-sigma", "0"], "--spike-sigma"),
        ("check_only_unknown", ["check", "{S}", "--only", "nope"], "--only"),
        ("check_layout_zero", ["check", "{S}", "--layout", "0"], "--layout"),
        ("check_max_lines_text", ["check", "{S}", "--max-lines", "x"], "--max-lines"),
        ("stats_unknown_run", ["stats", "{S}", "--run", "nope"], "nope"),
        ("stats_weight_nan", ["stats", "{S}", "--weight", "{R}=nan"], "--weight"),
        ("stats_weight_negative", ["stats", "{S}", "--weight", "{R}=-1"], "--weight"),
        ("stats_weight_text", ["stats", "{S}", "--weight", "{R}"], "--weight"),
        ("stats_unknown_column", ["stats", "{S}", "--column", "nope"], "nope"),
        ("stats_version_negative", ["stats", "{S}", "--version", "-2"], "--version"),
        ("stats_layout_zero", ["stats", "{S}", "--layout", "0"], "--layout"),
        ("push_no_destination", ["push", "{S}"], "DESTINATION"),
        ("unknown_command", ["frobnicate"], "frobnicate"),
        ("convert_rlds_float33", ["convert", "{RLDS_dtype_unknown}", "-o", "{T}/c10"], "features.json"),
        ("convert_rlds_shape_text", ["convert", "{RLDS_shape_text}", "-o", "{T}/c11"], "features.json"),
        ("convert_lerobot_fps_text", ["convert", "{LEROBOT_fps_text}", "-o", "{T}/c12"], "fps"),
        ("convert_lerobot_dtype", ["convert", "{LEROBOT_dtype_float33}", "-o", "{T}/c13"], "float33"),
    ]
    return cases


CLI = _cli_cases()


@pytest.mark.parametrize(("args", "needle"), [case[1:] for case in CLI], ids=[case[0] for case in CLI])
def test_cli_misuse_exits_1_or_2_naming_the_option(ctx: Ctx, args: list[str], needle: str) -> None:
    from rlarrow.cli.commands import cli

    def fill(arg: str) -> str:
        if arg.startswith("{RLDS_"):
            name = arg[len("{RLDS_"):-1]
            return str(_rlds(ctx, RLDS_SHAPES[name], name))
        if arg.startswith("{LEROBOT_"):
            name = arg[len("{LEROBOT_"):-1]
            return str(_lerobot(ctx, LEROBOT_INFOS[name][0], name))
        return (arg.replace("{S}", str(ctx.store.path)).replace("{T}", str(ctx.tmp))
                .replace("{R}", ctx.run).replace("{F}", str(FIXTURES)))

    result = CliRunner().invoke(cli, [fill(a) for a in args])
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exit_code in (1, 2), output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in output
    assert "unexpected" not in output, output
    assert needle in output, output
