"""``rlarrow convert INPUT --to FORMAT``: each writer's own options are flags, built into its options class.

The input is a Minari dataset written by Minari's own ``DataCollector`` (``tests/fixtures/minari``);
each output is read back by rlarrow's reader of that format (and, for the shard count, the files).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from rlarrow.cli import formats
from rlarrow.cli.transfer_commands import convert
from rlarrow.io import registry

SOURCE = Path(__file__).resolve().parents[1] / "fixtures" / "minari" / "cartpole" / "arrow-v0"
EPISODES = 10  # the fixture's (data/metadata.json: total_episodes)


def _writer(name: str):
    from rlarrow.io.envlogger import write_envlogger
    from rlarrow.io.hdf5 import write_robomimic
    from rlarrow.io.lerobot import write_lerobot
    from rlarrow.io.minari import write_minari
    from rlarrow.io.rlds import write_rlds

    return {"envlogger": write_envlogger, "minari": write_minari, "rlds": write_rlds,
            "lerobot": write_lerobot, "robomimic": write_robomimic}[name]


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(convert, [str(a) for a in args])
    return result.exit_code, result.output


@pytest.mark.parametrize("name", [f.name for f in registry.writers()])
def test_every_option_a_writer_takes_is_a_convert_flag_listed_in_its_help(name):
    fmt = registry.get(name)
    taken = set(inspect.signature(_writer(name)).parameters) - {"source", "directory", "path", "overwrite",
                                                                "progress"}
    cls = fmt.write_options_type()
    fields = set() if cls is None else {f.name for f in dataclasses.fields(cls)}
    assert fields == taken  # the options class is what write_<format> takes
    flags = formats.write_flags(fmt)
    assert {flag[2:].replace("-", "_") for flag in flags} == fields
    declared = {opt for param in convert.params for opt in param.opts}
    assert set(flags) <= declared
    code, text = run("--help")
    assert code == 0 and f"--to {name:<11}{' '.join(flags) or '(none)'}" in text
    assert all(flag in text for flag in flags)


def test_convert_to_lerobot_writes_with_the_flags_given(tmp_path):
    from rlarrow.io.lerobot import read_lerobot

    out = tmp_path / "lerobot"
    with pytest.warns(UserWarning, match="final observation"):  # (LeRobot keeps none: said)
        code, text = run(SOURCE, "--to", "lerobot", "-o", out, "--codebase", "v2.1", "--fps", "10",
                         "--task", "balance the pole")
    assert code == 0, text
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v2.1" and info["fps"] == 10
    tasks = [json.loads(line)["task"] for line in (out / "meta" / "tasks.jsonl").read_text().splitlines()]
    assert tasks == ["balance the pole"]
    first = pq.read_table(sorted(out.glob("data/**/*.parquet"))[0])
    assert first.column("timestamp").to_pylist()[:3] == pytest.approx([0.0, 0.1, 0.2])  # frame / fps
    with read_lerobot(out) as source:
        assert source.read()[1].num_rows == EPISODES


def test_convert_to_rlds_cuts_shards_at_episodes_per_shard(tmp_path):
    from rlarrow.io.rlds import read_rlds

    out = tmp_path / "rlds" / "1.0.0"
    code, text = run(SOURCE, "--to", "rlds", "-o", out, "--episodes-per-shard", "3")
    assert code == 0, text
    shards = sorted(p.name for p in out.iterdir() if ".tfrecord-" in p.name)
    assert len(shards) == 4 and all(s.endswith("-of-00004") for s in shards)  # 10 episodes, 3 a shard
    with read_rlds(out) as source:
        assert source.read()[1].num_rows == EPISODES


@pytest.mark.skipif(not registry.get("minari").write_options_type(), reason="no Minari writer options")
def test_convert_to_minari_takes_the_backend_and_dataset_id(tmp_path):
    pytest.importorskip("minari", reason="Minari's writer writes the dataset (pip install minari)")
    out = tmp_path / "minari"
    code, text = run(SOURCE, "--to", "minari", "-o", out, "--data-format", "parquet",
                     "--dataset-id", "cartpole/copy-v0")
    assert code == 0, text
    meta = json.loads((out / "data" / "metadata.json").read_text())
    assert meta["data_format"] == "parquet" and meta["dataset_id"] == "cartpole/copy-v0"


def test_a_writer_flag_of_another_format_or_without_to_is_a_usage_error(tmp_path):
    code, text = run(SOURCE, "--to", "rlds", "-o", tmp_path / "r", "--fps", "10")
    assert code == 2 and "--fps applies to --to lerobot, not --to rlds" in text
    assert not (tmp_path / "r").exists()
    code, text = run(SOURCE, "-o", tmp_path / "store", "--data-format", "arrow")
    assert code == 2 and "--data-format applies to --to minari" in text
    assert not (tmp_path / "store").exists()


def test_convert_format_takes_the_writer_options_object_or_keywords_not_both(tmp_path):
    from rlarrow.core.errors import ArgumentError
    from rlarrow.io.lerobot import LeRobotOptions
    from rlarrow.io.rlds import RldsWriteOptions
    from rlarrow.io.transcode import convert_format

    with pytest.raises(ArgumentError, match="takes a rlarrow.io.rlds"):
        convert_format(SOURCE, "rlds", tmp_path / "a", writing=LeRobotOptions())
    with pytest.raises(ArgumentError, match="not both"):
        convert_format(SOURCE, "rlds", tmp_path / "b", writing=RldsWriteOptions(), episodes_per_shard=2)
    written = convert_format(SOURCE, "rlds", tmp_path / "c", episodes_per_shard=5)
    assert len([p for p in written[0].iterdir() if ".tfrecord-" in p.name]) == 2
