"""The `rlarrow` command: --version, info, compact, and friendly errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
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
        version = "v1.1" if table == "steps" else "v1.0"  # steps 1.1 added `infos`
        assert f" {rows} " in line and line.rstrip().endswith(version), line
    run_id = populated.runs().column("run_id")[0].as_py()
    assert run_id in text and "populate" in text
    assert "on disk" in text and "KiB" in text
    assert "steps.observation.position: float32 (3,) list" in text
    assert "steps.observation.grid: uint8 (4, 5) " in text
    assert "memory.states: float32 (3,) " in text
    run_line = next(x for x in text.splitlines() if run_id in x)
    for part in ("name=populate", "num_envs=2", 'env="grid"', "params={lr:0.0003,gamma:0.99}", "seed=7"):
        assert part in run_line, run_line


def test_info_json(populated):
    out = rlarrow_cmd("info", str(populated.path), "--json")
    data = json.loads(out.stdout)
    assert data["tables"]["steps"]["rows"] == 18
    assert data["tables"]["steps"]["schema_version"] == "1.1"
    assert data["runs"][0]["name"] == "populate"
    assert data["runs"][0]["num_envs"] == 2
    assert data["runs"][0]["metadata"]["params"] == {"lr": 3e-4, "gamma": float(np.float32(0.99))}
    assert data["tables"]["steps"]["tensors"]["observation.position"] == "float32 (3,) list"


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
    from rlarrow.core.remote import RemoteStore

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
    obs = rlarrow.core.tensors.to_numpy(stored.column("observation"))
    assert len(rows) == stored.num_rows == 18
    assert np.array_equal(np.array([r["observation"]["position"] for r in rows], np.float32), obs["position"])
    assert np.array_equal(np.array([r["observation"]["grid"] for r in rows], np.uint8), obs["grid"])
    assert rows[0]["action"] == stored.column("action")[0].as_py() and rows[5]["action"] is None


COMMANDS = ["info", "repair", "migrate", "compact", "push", "convert", "export", "sql", "plot", "history",
            "vacuum", "delete", "label", "merge", "check"]


def test_every_help_renders_without_control_characters():
    """click's no-rewrap marker (a backspace, \\b) keeps examples as written and never shows."""
    from click.testing import CliRunner

    from rlarrow.cli.commands import cli

    runner = CliRunner()
    top = runner.invoke(cli, ["--help"])
    assert top.exit_code == 0 and all(c in top.output for c in COMMANDS)
    for command in COMMANDS:
        out = runner.invoke(cli, [command, "--help"])
        assert out.exit_code == 0, (command, out.output)
        assert "\\b" not in out.output and "\b" not in out.output, command
    sql_help = runner.invoke(cli, ["sql", "--help"], terminal_width=80).output
    lines = sql_help.splitlines()
    example = ("rlarrow sql runs.rlarrow \"select * from steps_to_threshold('train/loss', 0.05, "
               "direction := 'below')\"")
    assert "    " + example in lines  # one line, indented, though wider than the terminal
    assert "steps_decoded" in sql_help and "Examples:" in lines[lines.index("    " + example) - 5]
    plot_help = runner.invoke(cli, ["plot", "--help"]).output
    assert "--group-by" in plot_help and any(line.strip().startswith("rlarrow plot runs.rlarrow --episodes")
                                             for line in plot_help.splitlines())


def test_push_shows_no_progress_bar_when_stderr_is_not_a_terminal(populated, tmp_path):
    out = rlarrow_cmd("push", str(populated.path), f"file://{tmp_path}/copy.rlarrow")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""  # no tqdm bar written into a log or a pipe


@pytest.mark.parametrize(("message", "cli", "python"), [
    ("x: exists; remove it, or replace it (overwrite=True; --overwrite in the CLI)", "(--overwrite)",
     "overwrite=True"),
    ("d: not empty; replace its content with --overwrite (overwrite=True in Python)", "with --overwrite",
     "overwrite=True"),
    ("m.csv: 12 rows do not divide into num_envs=5", "--num-envs 5", "num_envs="),
    ("m.csv: does not record num_envs; assuming 1. Pass num_envs=... to recover", "Pass --num-envs N",
     "num_envs="),
    ("s: no such store; create it with rlarrow.Store.create('s')", "rlarrow convert INPUTS -o s",
     "Store.create"),
    ("s: could not write; the store is on read-only media: open it with readonly=True to read it",
     "commands that only read it still work", "readonly="),
    ("f: record fails its checksum (the file is damaged; on_corrupt='skip' skips such records)",
     "rlarrow convert --skip-corrupt", "on_corrupt"),
    ("d: damaged. Nothing was imported; import again with skip_corrupt=True (rlarrow convert --skip-corrupt) "
     "to import", "import again with rlarrow convert --skip-corrupt to import", "skip_corrupt="),
    ("m.csv: x in data row 3 (1e300) is not a float32; read it with dtype='float64'", "with --float64",
     "dtype="),
    ("m.pt: cannot unroll: no tensor for states; it has ['obs'] (map names with names={role: name}, on the "
     "command line --names states=NAME,...)", "(name the tensor of each role with --names ROLE=TENSOR",
     "names="),
    # what io/ says in Python's spelling only (issue 37: no CLI text in io/), as the CLI prints it
    ("m.pt: cannot unroll: no tensor for states; it has ['obs'] (map names with names={role: name})",
     "(name the tensor of each role with --names ROLE=TENSOR", "names="),
    ("s: imported before into run r (from p, t); again=True imports it again", "; --again imports it",
     "again="),
    ("a, b: make 2 runs (a, b...); run_id names one run: convert them one at a time",
     "--run-id names one run", "run_id"),
    ("p: video='keep' applies to lerobot datasets, and none of the inputs is one: leave it out",
     "p: --keep-video applies", "video="),
    ("p: images='encoded' applies to rlds datasets", "p: --keep-images-encoded applies", "images="),
    ("f.h5: external link; pass allow_hdf5_links=True", "pass --allow-hdf5-links", "allow_hdf5_links"),
    ("m.csv: pass num_envs=N, the memory's number of envs", "pass --num-envs N, the", "num_envs"),
    ("m.pt: pass the env's time limit as max_episode_steps=N to cut", "as --max-episode-steps N to",
     "max_episode_steps"),
    ("m.pt: assumed next-step (pass autoreset='next-step', 'same-step' or 'none' to say it)",
     "pass --autoreset next-step, same-step or none", "autoreset="),
    ("s: name 'x/y': export the other runs one at a time (run_id=...), or import", "at a time (--run-id RUN)",
     "run_id"),
    ("x: cannot be AV1 video; export with images='png'", "export with --images png", "images="),
    ("x: no format takes it; import_paths takes memory exports and experiment directories",
     "; rlarrow convert takes memory exports", "import_paths"),
])
def test_cli_errors_name_flags_not_python_arguments(message, cli, python):
    from rlarrow.cli.commands import cli_spelling

    text = cli_spelling(message)
    assert cli in text and python not in text, text


def test_cli_error_messages_end_to_end(tmp_path):
    missing = rlarrow_cmd("info", str(tmp_path / "nope.rlarrow"))
    assert missing.returncode == 1 and "rlarrow convert INPUTS -o" in missing.stderr
    assert "Store.create" not in missing.stderr and "Traceback" not in missing.stderr
    from rlarrow.io.memory.csv import write_csv

    write_csv({"states": np.ones((6, 1, 2), np.float32)}, tmp_path / "m.csv")
    uneven = rlarrow_cmd("convert", str(tmp_path / "m.csv"), "-o", str(tmp_path / "s.rlarrow"),
                         "--num-envs", "4")
    assert uneven.returncode == 1 and "--num-envs 4" in uneven.stderr and "num_envs=" not in uneven.stderr


def test_export_says_how_many_files_it_wrote_and_where(tmp_path):
    skrl = Path(__file__).resolve().parents[1] / "fixtures" / "skrl" / "wrapped" / "memories"
    assert rlarrow_cmd("convert", str(skrl), "-o", str(tmp_path / "s"), "--run-id", "r").returncode == 0
    out = rlarrow_cmd("export", str(tmp_path / "s"), "-o", str(tmp_path / "out"), "--format", "npz")
    written = sorted((tmp_path / "out" / "memories").iterdir())
    assert out.returncode == 0 and written
    assert out.stdout.strip().splitlines()[-1] == f"wrote {len(written)} file(s) to {tmp_path / 'out'}"


def test_delete_of_an_unknown_run_exits_1_naming_it_and_the_runs_there(populated):
    run = populated.runs().column("run_id")[0].as_py()
    out = rlarrow_cmd("delete", str(populated.path), "--run", "no-such-run")
    assert out.returncode == 1
    assert "no-such-run" in out.stderr and run in out.stderr
    assert populated.has_run(run)  # nothing deleted


def test_a_closed_pipe_ends_sql_quietly(populated):
    cmd = (f"{sys.executable} -m rlarrow sql {populated.path} 'select * from range(200000)' --format csv"
           " | head -1")
    out = subprocess.run(["bash", "-c", f"{cmd}; exit ${{PIPESTATUS[0]}}"], capture_output=True, text=True,
                         check=False)
    assert out.returncode in (0, 141), out.stderr
    assert out.stdout.strip() == '"range"'
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr


def test_warnings_show_as_one_line_without_python_source():
    from rlarrow.cli.commands import _format_warning

    text = _format_warning(rlarrow.RLArrowWarning("csv files do not record num_envs"), rlarrow.RLArrowWarning,
                           "/x/rlarrow/io/memory/csv.py", 12, "warnings.warn(...)")
    assert text == "warning: csv files do not record num_envs\n"


def test_a_failed_convert_into_a_new_path_leaves_no_store(tmp_path):
    bad = tmp_path / "memories" / "broken.npz"
    bad.parent.mkdir()
    bad.write_bytes(b"PK\x03\x04 not a zip")
    out = rlarrow_cmd("convert", str(bad.parent), "-o", str(tmp_path / "new" / "s.rlarrow"))
    assert out.returncode == 1
    assert not (tmp_path / "new").exists()


def test_cli_warnings_name_flags_too():
    from rlarrow.cli.commands import _format_warning

    text = _format_warning(UserWarning("m.pt: pass the env's time limit as max_episode_steps=N to cut them"),
                           UserWarning, "x.py", 1)
    assert text == "warning: m.pt: pass the env's time limit as --max-episode-steps N to cut them\n"
