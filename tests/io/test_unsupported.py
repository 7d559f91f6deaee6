"""Formats rlarrow does not import yet are named in one line, with what it does read."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from rlarrow.io.unsupported import describe_unsupported, supported_inputs


def _rlds(path):
    path.mkdir(parents=True)
    (path / "dataset_info.json").write_text(json.dumps({"name": "bridge", "version": "1.0.0"}))
    (path / "features.json").write_text(json.dumps({"featuresDict": {"steps": {}}}))
    (path / "bridge-train.array_record-00000-of-00004").write_bytes(b"\0" * 16)
    return path


def test_rlds_directories_of_array_record_shards_and_their_parent_are_named(tmp_path):
    # tfrecord shards are imported (rlarrow.io.rlds); ArrayRecord ones are named here
    rlds = _rlds(tmp_path / "bridge" / "1.0.0")
    for path in (rlds, rlds.parent):
        message = describe_unsupported(path)
        assert message is not None and "\n" not in message
        assert message.startswith(f"{path} looks like an RLDS dataset of ArrayRecord shards; rlarrow does "
                                  "not import ArrayRecord shards yet (convert them to tfrecord")
        assert message.endswith(f"supported inputs are: {supported_inputs()}")
    (rlds / "bridge-train.array_record-00000-of-00004").unlink()  # TFDS metadata alone: not a dataset
    assert describe_unsupported(rlds) is None
    (rlds / "bridge-train.tfrecord-00000-of-00004").write_bytes(b"")  # what rlarrow.io.rlds imports
    assert describe_unsupported(rlds) is None


def test_lerobot_and_zarr_are_named(tmp_path):
    lerobot = tmp_path / "pusht"
    (lerobot / "meta").mkdir(parents=True)
    (lerobot / "data" / "chunk-000").mkdir(parents=True)
    (lerobot / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v1.6", "fps": 10}))
    # (v2.x and v3.x are imported: rlarrow.io.lerobot)
    assert "looks like a LeRobot dataset of an older codebase" in describe_unsupported(lerobot)

    hdf5 = tmp_path / "policy.h5"  # no format took it (a Keras checkpoint, a damaged file): named
    hdf5.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    assert "looks like an HDF5 file that h5py cannot open, or of another layout" in describe_unsupported(hdf5)

    zarr = tmp_path / "replay.zarr"
    zarr.mkdir()
    (zarr / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    assert "looks like a zarr store" in describe_unsupported(zarr)


@pytest.mark.parametrize("path", [
    FIXTURES / "minari" / "cartpole" / "arrow-v0",
    FIXTURES / "minari" / "cartpole" / "hdf5-v0",
    FIXTURES / "rlds" / "robot",
    FIXTURES / "lerobot" / "pusht_v30",
    FIXTURES / "envlogger" / "catch",
    FIXTURES / "skrl" / "wrapped" / "memories",
    FIXTURES / "tfevents" / "torch",
    FIXTURES / "README.md",
    FIXTURES / "missing",
])
def test_what_rlarrow_reads_is_not_called_unsupported(path):
    assert describe_unsupported(path) is None
