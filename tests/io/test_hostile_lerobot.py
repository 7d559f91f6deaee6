"""Hostile LeRobot and RLDS inputs and LeRobot/RLDS exports stay inside their directories (issue 36).

Each case starts from the committed fixtures (``tests/fixtures/lerobot``, ``tests/fixtures/rlds``,
written by lerobot's and tfds's own writers), edits their metadata the way a hostile dataset would
(``../`` and absolute path templates, a ``../`` feature key, symlinks out of the dataset, a
ClassLabel file that is a symlink), runs ``rlarrow convert`` / ``rlarrow export`` under strace
(``tests/hostile.py``) and asserts that nothing touched the canary directory and that the command
failed with a message naming the file and the name, no traceback. The bombs (a 600-million-wide
``data_path`` field, zlib data that inflates far beyond its declared shape, PNG frames larger than
their declared shape) run in a subprocess that reports its time and peak memory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, REPO
from hostile import needs_strace, traced

HAVE_AV = importlib.util.find_spec("av") is not None
HAVE_PROTOBUF = importlib.util.find_spec("google.protobuf") is not None
needs_av = pytest.mark.skipif(not HAVE_AV, reason="LeRobot's cameras need PyAV: pip install 'rlarrow[video]'")
needs_protobuf = pytest.mark.skipif(
    not HAVE_PROTOBUF, reason="RLDS needs protobuf: pip install 'rlarrow[rlds]'"
)
ENV = {**os.environ, "PYTHONPATH": os.fspath(REPO)}
V30, V21 = FIXTURES / "lerobot" / "pusht_v30", FIXTURES / "lerobot" / "pusht_v21"
LABELS = FIXTURES / "rlds" / "labels"


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """A directory outside every input and output, holding what a hostile name would reach."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("the canary's secret\n")
    shutil.copy(V30 / "data" / "chunk-000" / "file-000.parquet", out / "file-000.parquet")
    shutil.copy(
        V30 / "videos" / "observation.images.top" / "chunk-000" / "file-000.mp4", out / "file-000.mp4"
    )
    return out


def copied(src: Path, tmp_path: Path, name: str = "ds") -> Path:
    dst = tmp_path / "work" / name
    shutil.copytree(src, dst)
    return dst


def edit_info(ds: Path, **changes: object) -> None:
    path = ds / "meta" / "info.json"
    info = json.loads(path.read_text())
    info.update(changes)
    path.write_text(json.dumps(info))


def refused(done: subprocess.CompletedProcess[str], touched: list[str], *words: str) -> None:
    """The command failed cleanly (no traceback), said ``words``, and touched nothing outside."""
    assert not touched, touched[:5]
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    for word in words:
        assert word in done.stderr, (word, done.stderr[-3000:])


def convert(ds: Path, canary: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    return traced(
        ["convert", os.fspath(ds), "-o", os.fspath(tmp_path / "work" / "store")],
        canary=canary,
        cwd=tmp_path / "work",
        env=ENV,
    )


# ------------------------------------------------------------------ LeRobot import: names stay inside


@needs_strace
@needs_av
@pytest.mark.parametrize("template", ["../../outside/file-000.parquet",
                                      pytest.param("{outside}/file-000.parquet", marks=pytest.mark.slow)])
def test_a_data_path_leading_outside_is_refused(tmp_path, canary, template):
    ds = copied(V30, tmp_path)
    edit_info(ds, data_path=template.format(outside=canary) if "{outside}" in template else template)
    done, touched = convert(ds, canary, tmp_path)
    refused(done, touched, "info.json", "file-000.parquet", "outside")


@needs_strace
@needs_av
@pytest.mark.slow
def test_a_v21_video_path_leading_outside_is_refused(tmp_path, canary):
    ds = copied(V21, tmp_path)
    edit_info(ds, video_path="../../outside/file-000.mp4")
    done, touched = convert(ds, canary, tmp_path)
    refused(done, touched, "info.json", "../../outside/file-000.mp4")


@needs_strace
@needs_av
@pytest.mark.parametrize("keep", [False, True], ids=["decoded", "kept as video"])
def test_a_video_that_is_a_playlist_naming_files_outside_is_not_followed(tmp_path, canary, keep):
    """A ``.m3u8`` where a camera's mp4 should be: FFmpeg's HLS reader would decode the files it lists."""
    ds = copied(V30, tmp_path)
    edit_info(ds, video_path="videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.m3u8")
    for mp4 in sorted((ds / "videos").rglob("*.mp4")):
        mp4.with_suffix(".m3u8").write_text("#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n"
                                           f"{canary / 'file-000.mp4'}\n#EXT-X-ENDLIST\n")
        mp4.unlink()
    args = ["convert", os.fspath(ds), "-o", os.fspath(tmp_path / "work" / "store")]
    done, touched = traced(args + (["--keep-video"] if keep else []), canary=canary, cwd=tmp_path / "work",
                           env=ENV)
    refused(done, touched, "file-000.m3u8")


@needs_strace
@needs_av
def test_a_feature_key_leading_outside_is_refused(tmp_path, canary):
    """A camera named ``../../outside``: its video path, ``videos/{video_key}/...``, leaves the dataset."""
    ds = copied(V30, tmp_path)
    info = json.loads((ds / "meta" / "info.json").read_text())
    old, new = "observation.images.top", "../../outside"
    info["features"] = {(new if k == old else k): v for k, v in info["features"].items()}
    info["video_path"] = "videos/{video_key}/file-{file_index:03d}.mp4"
    (ds / "meta" / "info.json").write_text(json.dumps(info))
    episodes = ds / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(episodes)
    pq.write_table(table.rename_columns([c.replace(old, new) for c in table.column_names]), episodes)
    done, touched = convert(ds, canary, tmp_path)
    refused(done, touched, "info.json", "../../outside")


@needs_strace
@needs_av
@pytest.mark.parametrize(
    "link", ["data/chunk-000/file-000.parquet"] + [pytest.param(p, marks=pytest.mark.slow) for p in (
        "data/chunk-000", "meta/episodes/chunk-000", "meta/info.json")]
)
def test_a_symlink_out_of_the_dataset_is_not_followed(tmp_path, canary, link):
    ds = copied(V30, tmp_path)
    target = ds / link
    if target.is_dir():
        shutil.copytree(target, canary / "dir")
        shutil.rmtree(target)
        os.symlink(canary / "dir", target)
    else:
        shutil.copy(target, canary / target.name)
        target.unlink()
        os.symlink(os.path.relpath(canary / target.name, target.parent), target)
    done, touched = convert(ds, canary, tmp_path)
    refused(done, touched, "leads outside")


@needs_av
def test_symlinks_that_stay_inside_the_dataset_are_followed(tmp_path):
    from rlarrow.io.lerobot import import_lerobot

    ds = copied(V30, tmp_path)
    data = ds / "data" / "chunk-000"
    (ds / "elsewhere").mkdir()
    (data / "file-000.parquet").rename(ds / "elsewhere" / "frames.parquet")
    os.symlink("../../elsewhere/frames.parquet", data / "file-000.parquet")
    report = import_lerobot(ds, tmp_path / "s", progress=False)
    assert (report.episodes, report.steps) == (3, 19 + 3)


# ------------------------------------------------------------------ RLDS import: label files stay inside


@needs_strace
@needs_protobuf
def test_a_label_file_that_is_a_symlink_out_of_the_dataset_is_refused(tmp_path, canary):
    ds = copied(LABELS, tmp_path)
    (ds / "outcome.labels.txt").unlink()
    os.symlink(canary / "secret.txt", ds / "outcome.labels.txt")
    done, touched = convert(ds, canary, tmp_path)
    refused(done, touched, "outcome.labels.txt", "leads outside")
    assert "canary's secret" not in done.stdout + done.stderr


@needs_strace
@needs_protobuf
@pytest.mark.slow
def test_a_shard_that_is_a_symlink_out_of_the_dataset_is_refused(tmp_path, canary):
    ds = copied(LABELS, tmp_path)
    shard = next(ds.glob("*.tfrecord-*"))
    shard.rename(canary / shard.name)
    os.symlink(canary / shard.name, shard)
    done, touched = convert(ds, canary, tmp_path)
    refused(done, touched, shard.name, "leads outside")


# ------------------------------------------------------------------ exports: file names stay inside -o


def hostile_store(tmp_path: Path) -> Path:
    """A store imported from a LeRobot dataset whose camera field is named ``cam/../../../outside``."""
    from rlarrow.io.lerobot import import_lerobot

    ds = copied(V30, tmp_path, "named")
    old, new = "observation.image", "observation.cam/../../../outside"
    info = json.loads((ds / "meta" / "info.json").read_text())
    info["features"] = {(new if k == old else k): v for k, v in info["features"].items()}
    (ds / "meta" / "info.json").write_text(json.dumps(info))
    data = ds / "data" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(data)
    pq.write_table(table.rename_columns([new if c == old else c for c in table.column_names]), data)
    import_lerobot(ds, tmp_path / "work" / "store", progress=False)
    return tmp_path / "work" / "store"


@needs_strace
@needs_av
@pytest.mark.parametrize(
    ("codebase", "images"), [("v3.0", "video")] + [pytest.param(*p, marks=pytest.mark.slow) for p in (
        ("v2.1", "video"), ("v3.0", "png"), ("v2.1", "png"))]
)
def test_an_export_refuses_a_field_name_that_leaves_its_directory(tmp_path, canary, codebase, images):
    store = hostile_store(tmp_path)
    out = tmp_path / "work" / "export" / "out"
    done, touched = traced(
        [
            "export",
            os.fspath(store),
            "-o",
            os.fspath(out),
            "--format",
            "lerobot",
            "--codebase",
            codebase,
            "--images",
            images,
        ],
        canary=canary,
        cwd=tmp_path / "work",
        env=ENV,
    )
    refused(done, touched, "../../../outside", "rename")
    assert (
        not out.exists() and not out.parent.exists()
    )  # (nothing left behind: the folder made for it neither)


def test_an_rlds_export_refuses_a_split_that_leaves_its_directory(tmp_path):
    from rlarrow.core.confined import file_name_part
    from rlarrow.core.errors import InvalidInputError

    for name in ("../x", "a/b", "a\\b", "..", ".", "", "nul\x00"):
        with pytest.raises(InvalidInputError, match="rename it"):
            file_name_part(name, what="the split", fix="rename it")
    assert file_name_part("train..x", what="the split", fix="-") == "train..x"


# ------------------------------------------------------------------ bombs: bounded before allocation

_MEASURE = """
import json, resource, sys, time
from rlarrow.core.errors import RLArrowError
from rlarrow.io.{module} import import_{module} as run
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
before, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, cpu()
try:
    run(sys.argv[1], sys.argv[2], progress=False)
    error = None
except RLArrowError as exc:
    error = f"{{type(exc).__name__}}: {{exc}}"
print(json.dumps({{"cpu_seconds": cpu() - start, "error": error,
                  "grew_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def measured(module: str, ds: Path, tmp_path: Path) -> dict[str, object]:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _MEASURE.format(module=module),
            os.fspath(ds),
            os.fspath(tmp_path / "bomb-store"),
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["error"], got
    # CPU time, not wall time: the machines that run the suite are shared
    assert float(got["cpu_seconds"]) < 1.0 and float(got["grew_mb"]) < 200, got  # type: ignore[arg-type]
    return got


@needs_av
@pytest.mark.parametrize(
    "template",
    [
        "data/chunk-{chunk_index:0600000000d}/file-{file_index:03d}.parquet",
        "data/{chunk_index:.600000000f}.parquet",
        "data/{chunk_index.__class__}.parquet",
    ],
)
def test_a_huge_template_width_is_refused_at_once(tmp_path, template):
    ds = copied(V30, tmp_path)
    edit_info(ds, data_path=template)
    got = measured("lerobot", ds, tmp_path)
    assert "info.json" in str(got["error"]) and "path template" in str(got["error"])


def png_header_only(height: int, width: int) -> bytes:
    """A PNG whose header says height x width RGB and whose data is one zlib stream of zeros (a bomb)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = zlib.compress(bytes(min((width * 3 + 1) * height, 8 << 20)), 9)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", raw)
        + chunk(b"IEND", b"")
    )


@needs_av
@pytest.mark.parametrize("declared", [False, True])
def test_png_frames_beyond_their_declared_shape_are_refused_before_decoding(tmp_path, declared):
    """PNG headers of 20000x20000 in a 24x32 dataset; or declared so in info.json too (over the limit)."""
    ds = copied(V30, tmp_path)
    data = ds / "data" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(data)
    blob = png_header_only(20000, 20000)
    frames = pa.StructArray.from_arrays(
        [pa.array([blob] * table.num_rows, pa.binary()), pa.array(["f.png"] * table.num_rows)],
        ["bytes", "path"],
    )
    i = table.column_names.index("observation.image")
    pq.write_table(table.set_column(i, "observation.image", frames), data)
    if declared:
        info = json.loads((ds / "meta" / "info.json").read_text())
        info["features"]["observation.image"]["shape"] = [20000, 20000, 3]
        (ds / "meta" / "info.json").write_text(json.dumps(info))
    got = measured("lerobot", ds, tmp_path)
    assert "20000" in str(got["error"]) and "observation.image" in str(got["error"])


def zlib_dataset(tmp_path: Path, declared: int) -> Path:
    """A one-episode RLDS dataset whose step tensor ``x`` (float32[declared], zlib) inflates to 1.5 GB."""
    from rlarrow.io.codecs.tfrecord import frame_records
    from rlarrow.io.rlds import _example_class

    ds = tmp_path / "zlib" / "1.0.0"
    ds.mkdir(parents=True)
    tensor = "tensorflow_datasets.core.features.tensor_feature.Tensor"
    steps = {
        "is_first": {"pythonClassName": tensor, "tensor": {"dtype": "bool", "encoding": "none", "shape": {}}},
        "x": {
            "pythonClassName": tensor,
            "tensor": {"dtype": "float32", "encoding": "zlib", "shape": {"dimensions": [str(declared)]}},
        },
    }
    features = {
        "featuresDict": {
            "features": {
                "steps": {
                    "pythonClassName": "tensorflow_datasets.core.features.dataset_feature.Dataset",
                    "sequence": {"feature": {"featuresDict": {"features": steps}}, "length": "-1"},
                }
            }
        }
    }
    (ds / "features.json").write_text(json.dumps(features))
    (ds / "dataset_info.json").write_text(
        json.dumps({"name": "zlib", "version": "1.0.0", "splits": [{"name": "train", "shardLengths": ["1"]}]})
    )
    bomb = zlib.compressobj(9)
    blob = b"".join(bomb.compress(bytes(1 << 20)) for _ in range(1500)) + bomb.flush()  # 1.5 GB of zeros
    example = _example_class()()
    example.features.feature["steps/is_first"].int64_list.value.append(1)
    example.features.feature["steps/x"].bytes_list.value.append(blob)
    (ds / "zlib-train.tfrecord-00000-of-00001").write_bytes(frame_records([example.SerializeToString()]))
    return ds


@needs_protobuf
@pytest.mark.parametrize("declared", [7, pytest.param(1500 * (1 << 20) // 4, marks=pytest.mark.slow)])
def test_zlib_tensors_inflate_at_most_to_their_declared_size(tmp_path, declared):
    ds = zlib_dataset(tmp_path, declared)
    assert ds.joinpath("zlib-train.tfrecord-00000-of-00001").stat().st_size < 2 << 20
    got = measured("rlds", ds, tmp_path)
    assert "steps/x" in str(got["error"])


@needs_protobuf
def test_zlib_tensors_of_their_declared_size_still_import(tmp_path):
    from rlarrow.core.confined import inflate

    values = np.arange(7, dtype="<f4")
    assert np.array_equal(
        np.frombuffer(inflate(zlib.compress(values.tobytes()), 28, source="x", what="t"), "<f4"), values
    )
    for size in (27, 29):
        with pytest.raises(Exception, match="another size"):
            inflate(zlib.compress(values.tobytes()), size, source="x", what="t")
