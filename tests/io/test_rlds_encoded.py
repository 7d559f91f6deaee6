"""RLDS images kept encoded on request: the shards' own PNG/JPEG bytes, decoded on demand.

``import_rlds(..., images="encoded")`` (``rlarrow convert --keep-images-encoded``) keeps each
image as the bytes the shard holds; :func:`rlarrow.io.rlds.decode_image` gives ``tfds``'s pixels
(checked against the fixtures' ``expected.npz``: every value ``tfds`` returned), and an RLDS
export writes the same bytes back, JPEG included, so nothing is re-encoded.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core import metadata
from rlarrow.core.errors import ArgumentError

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("google.protobuf") is None,
    reason="RLDS needs protobuf: pip install 'rlarrow[rlds]'",
)
RLDS = FIXTURES / "rlds"


def blobs_by_episode(path):
    """{split/index: {field: [bytes per step]}} of a store's image fields kept encoded."""
    store = rlarrow.Store.open(path)
    steps = store.read("steps")
    out = {}
    for ep in store.read("episodes").to_pylist():
        rows = steps.filter(pc.equal(steps["episode_id"], ep["episode_id"])).sort_by("step")
        obs = rows["observation"].combine_chunks()
        meta = metadata.decode(ep["metadata"], ep["metadata_types"])["rlds"]
        fields = list(obs.type) if pa.types.is_struct(obs.type) else []  # (catch: a plain board)
        out[f"{meta['split']}/{meta['index']}"] = {
            f.name: obs.field(i).to_pylist() for i, f in enumerate(fields) if pa.types.is_binary(f.type)
        }
    return store, out


@pytest.mark.parametrize("name", ["robot", "catch"])
def test_kept_images_are_encoded_bytes_that_decode_to_tfds_pixels(tmp_path, name):
    from rlarrow.io.rlds import decode_image, import_rlds

    import_rlds(RLDS / name, tmp_path / "s", images="encoded", progress=False)
    want = np.load(RLDS / f"{name}.expected.npz")
    store, episodes = blobs_by_episode(tmp_path / "s")
    seen = 0
    for key, fields in episodes.items():
        for field, blobs in fields.items():
            pixels = want[f"{key}/steps/observation/{field}"]
            for t, blob in enumerate(blobs):
                assert blob[:2] == b"\xff\xd8" or blob[:8] == b"\x89PNG\r\n\x1a\n"
                np.testing.assert_array_equal(decode_image(blob, pixels.shape[-1]), pixels[t])
                seen += 1
    if name == "robot":
        assert seen > 0
        run = store.runs().to_pylist()[0]
        assert metadata.decode(run["metadata"], run["metadata_types"])["images"] == "encoded"


def test_an_export_writes_the_same_bytes_back_and_decodes_to_tfds_pixels(tmp_path):
    from rlarrow.io.rlds import export_rlds, import_rlds

    import_rlds(RLDS / "robot", tmp_path / "s", images="encoded", progress=False)
    out = export_rlds(tmp_path / "s", tmp_path / "out")
    features = json.loads((out / "features.json").read_text())
    assert features == json.loads((RLDS / "robot" / "features.json").read_text())  # JPEG features stay JPEG
    import_rlds(out, tmp_path / "again", images="encoded", progress=False)
    assert blobs_by_episode(tmp_path / "s")[1] == blobs_by_episode(tmp_path / "again")[1]
    # decoded, the export gives tfds's pixels exactly: the JPEGs were not encoded again
    import_rlds(out, tmp_path / "decoded", progress=False)
    import_rlds(RLDS / "robot", tmp_path / "direct", progress=False)
    a = (
        rlarrow.Store.open(tmp_path / "decoded")
        .read("steps")
        .sort_by([("episode_id", "ascending"), ("step", "ascending")])
    )
    b = (
        rlarrow.Store.open(tmp_path / "direct")
        .read("steps")
        .sort_by([("episode_id", "ascending"), ("step", "ascending")])
    )
    assert a.column("observation").equals(b.column("observation"))


def test_the_cli_keeps_images_encoded_and_bad_modes_are_refused(tmp_path):
    from rlarrow.io.rlds import import_rlds

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlarrow",
            "convert",
            str(RLDS / "robot"),
            "-o",
            str(tmp_path / "s"),
            "--keep-images-encoded",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert blobs_by_episode(tmp_path / "s")[1]
    obs_type = rlarrow.Store.open(tmp_path / "s").schema("steps").field("observation").type
    assert any(pa.types.is_binary(f.type) for f in obs_type)
    with pytest.raises(ArgumentError, match="images="):
        import_rlds(RLDS / "robot", tmp_path / "x", images="raw")


@pytest.mark.parametrize("fmt", [
    "lerobot",
    pytest.param("minari", marks=pytest.mark.skipif(importlib.util.find_spec("minari") is None,
                                                     reason="minari is not installed: pip install minari")),
    "robomimic",
])
def test_exports_of_numbers_refuse_encoded_images_and_say_what_to_do(tmp_path, fmt):
    from rlarrow.io import registry
    from rlarrow.io.rlds import import_rlds

    import_rlds(RLDS / "robot", tmp_path / "s", images="encoded", progress=False)
    exporter = registry.get(fmt).export
    assert exporter is not None
    with pytest.raises(rlarrow.InvalidInputError, match="hold bytes .* decoded"):
        exporter(tmp_path / "s", tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
