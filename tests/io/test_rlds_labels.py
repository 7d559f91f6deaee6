"""RLDS class-label names and episodes of no steps survive an import and an export.

The ``labels`` fixture (``make_rlds_fixtures.py``, a ``tfds`` RLDS builder) has a ClassLabel
action (``left``/``stay``/``right``) and episode ``outcome`` (``fail``/``success``), whose names
tfds keeps in ``*.labels.txt`` beside ``features.json``, and an episode of no steps between two
others. ``labels.expected.npz`` holds what ``tfds`` returned.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pyarrow.compute as pc
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core import metadata
from rlarrow.core.tensors import to_numpy

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("google.protobuf") is None,
    reason="RLDS needs protobuf: pip install 'rlarrow[rlds]'",
)
SRC = FIXTURES / "rlds" / "labels"
NAMES = {"outcome": ["fail", "success"], "steps-action": ["left", "stay", "right"]}


def episodes_of(path):
    """[(split/index, num_steps, outcome, actions)] of a store, in tfds's order."""
    store = rlarrow.Store.open(path)
    steps = store.read("steps")
    out = []
    for ep in store.read("episodes").to_pylist():
        meta = metadata.decode(ep["metadata"], ep["metadata_types"])
        rows = steps.filter(pc.equal(steps["episode_id"], ep["episode_id"])).sort_by("step")
        actions = to_numpy(rows["action"], fill_value=0).tolist() if rows.num_rows else []
        out.append(
            (f"{meta['rlds']['split']}/{meta['rlds']['index']}", ep["num_steps"], meta["outcome"], actions)
        )
    return sorted(out)


def test_names_and_an_episode_of_no_steps_are_imported(tmp_path):
    from rlarrow.io.rlds import import_rlds

    import_rlds(SRC, tmp_path / "s", progress=False)
    want = np.load(FIXTURES / "rlds" / "labels.expected.npz")
    got = episodes_of(tmp_path / "s")
    assert [(k, n, o) for k, n, o, _ in got] == [
        (f"train/{e}", int(want[f"train/{e}/num_steps"]), int(want[f"train/{e}/outcome"])) for e in range(3)
    ]
    assert 0 in [n for _, n, _, _ in got]
    for key, n, _, actions in got:
        if n:
            assert actions[: n - 1] == want[f"{key}/steps/action"].tolist()[: n - 1]
    run = rlarrow.Store.open(tmp_path / "s").runs().to_pylist()[0]
    assert metadata.decode(run["metadata"], run["metadata_types"])["labels"] == NAMES


def test_an_export_keeps_the_names_and_the_episode_of_no_steps(tmp_path):
    from rlarrow.io.rlds import export_rlds, import_rlds

    import_rlds(SRC, tmp_path / "s", progress=False)
    out = export_rlds(tmp_path / "s", tmp_path / "out")
    for key in NAMES:
        assert (out / f"{key}.labels.txt").read_bytes() == (SRC / f"{key}.labels.txt").read_bytes()
    assert json.loads((out / "dataset_info.json").read_text())["splits"][0]["shardLengths"] == ["3"]
    import_rlds(out, tmp_path / "back", progress=False)
    assert episodes_of(tmp_path / "back") == episodes_of(tmp_path / "s")


@pytest.mark.skipif(
    importlib.util.find_spec("tensorflow_datasets") is None,
    reason="the check against tfds needs TensorFlow and tensorflow-datasets "
    "(a test-only peer: pip install tensorflow-cpu tensorflow-datasets)",
)
def test_tfds_reads_the_names_and_every_episode_of_the_export(tmp_path):
    import tensorflow_datasets as tfds

    from rlarrow.io.rlds import export_rlds, import_rlds

    import_rlds(SRC, tmp_path / "s", progress=False)
    builder = tfds.builder_from_directory(str(export_rlds(tmp_path / "s", tmp_path / "out")))
    assert builder.info.features["outcome"].names == NAMES["outcome"]
    assert builder.info.features["steps"]["action"].names == NAMES["steps-action"]
    lengths = [len(list(e["steps"])) for e in tfds.as_numpy(builder.as_dataset(split="train"))]
    assert sorted(lengths) == [0, 3, 4]
