"""The format registry: every format is recognised, offered and imported through it alone."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import rlarrow
from rlarrow.cli import formats as cli_formats
from rlarrow.cli.commands import cli
from rlarrow.io import registry
from rlarrow.io.importing import import_paths
from rlarrow.io.memory.snapshot import MemorySnapshot
from rlarrow.io.registry import Format, Imported, ImportOptions
from tests.conftest import FIXTURES

SKRL = FIXTURES / "skrl" / "wrapped" / "memories"


def _snapshot() -> MemorySnapshot:
    rng = np.random.default_rng(0)
    return MemorySnapshot({
        "states": rng.standard_normal((6, 2, 3)).astype(np.float32),
        "terminated": np.zeros((6, 2, 1), bool),
    }, name="m")


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """A real sample of every registered format, written by rlarrow's own writers, plus the fixtures."""
    from rlarrow.io.memory.importer import write_memory
    from rlarrow.io.tfevents import write_tfevents

    tmp = tmp_path_factory.mktemp("formats")
    snap = _snapshot()
    out: dict[str, list[Path]] = {"pt": [], "npz": [], "csv": [], "parquet": []}
    for fmt in out:
        if fmt == "pt" and importlib.util.find_spec("torch") is None:
            continue
        out[fmt].append(write_memory(snap, tmp / f"m.{fmt}", fmt))
        out[fmt] += sorted(SKRL.glob(f"*.{fmt}"))
    out["tfevents"] = write_tfevents({"run_id": ["r"], "scope": ["train"], "tag": ["train/loss"], "step": [1],
                                      "value": [0.5]},
                                     tmp / "logs")
    out["tfevents"] += sorted((FIXTURES / "tfevents").rglob("*tfevents*"))
    out["minari"] = [FIXTURES / "minari" / "cartpole" / b for b in ("arrow-v0", "parquet-v0", "hdf5-v0")]
    out["hdf5"] = sorted((FIXTURES / "hdf5").glob("*.hdf5"))
    out["rlds"] = [FIXTURES / "rlds" / "catch", FIXTURES / "rlds" / "robot"]
    out["lerobot"] = [FIXTURES / "lerobot" / "pusht_v30"]
    out["envlogger"] = [FIXTURES / "envlogger" / "catch"]
    if importlib.util.find_spec("envlogger") is not None:
        from rlarrow.io.envlogger import export_envlogger, import_envlogger

        store = tmp / "s.rlarrow"
        report = import_envlogger(FIXTURES / "envlogger" / "catch", store, progress=False)
        out["envlogger"].append(export_envlogger(store, tmp / "catch_again", run_id=report.run_id))
    return out


def test_every_format_detects_its_own_files_and_rejects_the_others(samples):
    assert set(samples) == {f.name for f in registry.importers()}
    for name, paths in samples.items():
        if name == "pt" and not paths:
            continue  # (no torch to write one)
        assert paths, name
        for path in paths:
            assert path.exists(), path
            assert registry.detect(path) is registry.get(name), (name, path)
            assert registry.get(name).detect(path), (name, path)
            others = [f.name for f in registry.FORMATS.values() if f.name != name and f.detect(path)]
            assert others == [], (path, others)


def test_a_memory_export_without_its_suffix_is_recognised_by_content(samples, tmp_path):
    for name in ("npz", "parquet"):
        bare = tmp_path / f"export-{name}"
        bare.write_bytes(samples[name][0].read_bytes())
        assert registry.detect(bare) is registry.get(name)
        assert registry.detect(bare, content=False) is None


def test_folders_and_missing_paths_are_no_format(tmp_path):
    assert registry.detect(tmp_path) is None  # an empty folder
    assert registry.detect(tmp_path / "missing.pt") is None
    assert registry.detect(FIXTURES / "tfevents") is None  # a log directory: looked into, not a dataset


def test_the_cli_export_choices_are_the_registry_exporters():
    export = cli.commands["export"]
    choices = next(p for p in export.params if p.name == "fmt").type.choices
    assert list(choices) == [f.name for f in registry.exporters()]
    assert set(choices) == {"pt", "npz", "csv", "parquet", "envlogger", "minari", "rlds", "lerobot",
                            "robomimic", "tfevents"}
    assert all(f.export is not None for f in registry.exporters())
    # robomimic is export only: robomimic files are imported by hdf5, with D4RL's
    assert {f.name for f in registry.importers()} == set(registry.FORMATS) - {"robomimic"}
    assert not registry.get("robomimic").detect(FIXTURES / "hdf5" / "robomimic_d4rl.hdf5")
    assert registry.fallback() is registry.get("pt")


def test_every_declared_option_is_an_option_of_its_command():
    flags = {name: {o for p in cli.commands[name].params for o in p.opts} for name in ("convert", "export")}
    for fmt in registry.FORMATS.values():
        assert set(cli_formats.convert_flags(fmt)) <= flags["convert"], fmt.name
        assert set(cli_formats.export_flags(fmt)) <= flags["export"], fmt.name
    # the CLI's words are the CLI's: rlarrow's own formats carry none of them
    assert not any(f.convert_help or f.export_help or f.convert_options or f.export_options or f.export_empty
                   for f in registry.FORMATS.values())
    assert set(cli_formats.CONVERT_HELP) == {f.name for f in registry.importers()}
    assert set(cli_formats.EXPORT_HELP) == {f.name for f in registry.exporters()}


def test_the_convert_help_lists_every_importer():
    text = CliRunner().invoke(cli, ["convert", "--help"]).output
    for fmt in registry.importers():
        said = cli_formats.convert_help(fmt)
        assert said is not None
        assert said[0] in text and said[1].split("\n")[0] in text


def test_a_plugin_format_without_cli_words_gets_its_summary():
    plain = Format(name="plain", summary="plain numbers, one a line", detect=registry.by_suffix(".num"),
                   import_=_toy_import, export=lambda *a, **k: [], suffixes=(".num",))
    assert cli_formats.convert_help(plain) == ("*.num", "plain numbers, one a line")
    assert cli_formats.export_help(plain) == "plain (plain numbers, one a line)"
    assert cli_formats.export_empty(plain) == "nothing to export as plain in the store"
    # its own words, where it has them
    assert cli_formats.convert_help(TOY) == ("*.toy", "toy files: one run")


def test_importing_the_registry_imports_no_format():
    heavy = ("torch", "dm_env", "envlogger", "rlarrow.io.tfevents", "rlarrow.io.envlogger",
             "rlarrow.io.minari", "rlarrow.io.memory.importer")
    code = f"import sys, rlarrow.io.registry as r; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_register_refuses_a_name_twice_and_unregister_unknown():
    with pytest.raises(ValueError, match="registered already"):
        registry.register(registry.get("npz"))
    with pytest.raises(KeyError, match="unknown format"):
        registry.unregister("nope")


# --------------------------------------------------------------------------- a format added in a test


def _toy_import(sources: Sequence[Path], store: rlarrow.Store, options: ImportOptions) -> Imported:
    """A toy importer: each ``.toy`` file holds one number, a scalar ``toy/value`` at step i."""
    run_id = store.add_run(source="toy", run_id=options.run_id, name=options.name)
    values = [float(p.read_text()) for p in sources]
    store.append("scalars", {"run_id": [run_id] * len(values), "scope": ["train"] * len(values),
                             "tag": ["toy/value"] * len(values), "step": list(range(len(values))),
                             "value": values})
    return Imported(run_id, lines=[f"imported {len(values)} toy file(s) into run {run_id}"])


TOY = Format(name="toy", summary="a number in a text file (a format made up by a test)",
             detect=registry.by_suffix(".toy"), import_=_toy_import, suffixes=(".toy",), noun="toy files",
             convert_help=("*.toy", "toy files: one run"))


@pytest.fixture
def toy():
    registry.register(TOY)
    try:
        yield TOY
    finally:
        registry.unregister("toy")
    assert "toy" not in registry.FORMATS


def test_a_registered_format_is_imported_with_no_other_change(toy, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.toy").write_text("1.5")
    (tmp_path / "in" / "b.toy").write_text("2.5")
    assert registry.detect(tmp_path / "in" / "a.toy") is toy
    report = import_paths([tmp_path / "in"], tmp_path / "s.rlarrow", progress=False)
    assert "imported 2 toy file(s)" in str(report)
    st = rlarrow.Store.open(tmp_path / "s.rlarrow", readonly=True)
    assert st.read("scalars", columns=["value"]).column("value").to_pylist() == [1.5, 2.5]
    sources = st.read("sources", columns=["format", "path"]).to_pylist()
    assert {s["format"] for s in sources} == {"toy"}
    # the same files again are skipped, as every format's are
    again = import_paths([tmp_path / "in" / "a.toy"], tmp_path / "s.rlarrow", progress=False)
    assert again.runs == [] and "imported before" in str(again)


def test_rlarrow_convert_takes_a_registered_format_beside_memory_exports(toy, tmp_path):
    (tmp_path / "x.toy").write_text("7")
    mem = next(SKRL.glob("*.npz"))
    store = tmp_path / "s.rlarrow"
    result = CliRunner().invoke(cli, ["convert", str(tmp_path / "x.toy"), str(mem), "-o", str(store)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "imported 1 toy file(s)" in result.output and "converted 1 file(s)" in result.output
    st = rlarrow.Store.open(store, readonly=True)
    sources = st.read("runs", columns=["source"]).column("source").to_pylist()
    assert sorted(sources) == ["memory-export", "toy"]
    assert st.read("scalars", columns=["value"]).column("value").to_pylist() == [7.0]


def test_without_its_registration_the_toy_file_is_refused(tmp_path):
    (tmp_path / "x.toy").write_text("7")
    result = CliRunner().invoke(cli, ["convert", str(tmp_path / "x.toy"), "-o", str(tmp_path / "s")])
    assert result.exit_code == 1 and "not a memory export" in result.output


# --------------------------------------------------------------------------- the renamed memory import


def test_convert_memory_is_a_deprecated_alias_of_import_memory(monkeypatch, tmp_path):
    from rlarrow.io.memory import importer

    assert "convert_memory" not in importer.__all__ and "import_memory" in importer.__all__
    monkeypatch.setattr(importer, "_DEPRECATION_SAID", False)
    with pytest.warns(DeprecationWarning, match="import_memory"):
        report = importer.convert_memory([next(SKRL.glob("*.npz"))], tmp_path / "s", progress=False)
    assert report.snapshots == 1 and report.rows > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        again = importer.convert_memory([next(SKRL.glob("*.npz"))], tmp_path / "s", progress=False)
    assert again.run_id != report.run_id
    # the snapshots reader moved to rlarrow.io.memory.stored and is still importable from the importer
    from rlarrow.io.memory.stored import snapshots

    assert importer.snapshots is snapshots
    assert len(list(snapshots(tmp_path / "s"))) == 2
