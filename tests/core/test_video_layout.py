"""The video layout: cameras kept as mp4 streams (``videos`` table), decoded on demand.

A LeRobot dataset imported with ``video="keep"`` (``rlarrow convert --keep-video``) keeps each
episode's segment of each camera's mp4, its packets copied. Every reader that decodes must give
exactly the frames that decoding the original gives: the same dataset imported with its
cameras decoded is the reference (``Reader``/exports, SQL's ``video_frame``, ``StreamingDataset``
with shuffles, windows, transitions and DataLoader workers).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import numpy as np
import pyarrow.compute as pc
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core.errors import CorruptFileError
from rlarrow.core.tensors import to_numpy

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("av") is None, reason="the video layout needs PyAV: pip install 'rlarrow[video]'"
)
SRC = FIXTURES / "lerobot" / "pusht_v30"
MP4 = SRC / "videos" / "observation.images.top" / "chunk-000" / "file-000.mp4"
LENGTHS = (6, 8, 5)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """The fixture imported twice: cameras kept as video, and decoded (the reference)."""
    from rlarrow.io.lerobot import import_lerobot

    root = tmp_path_factory.mktemp("video")
    import_lerobot(SRC, root / "kept", video="keep", progress=False)
    import_lerobot(SRC, root / "decoded", progress=False)
    return root / "kept", root / "decoded"


def test_encoded_frames_decode_in_any_order_from_the_key_frame_before_them():
    from rlarrow.core import video

    frames = np.zeros((9, 16, 16, 3), np.uint8)
    frames[..., 0] = (np.arange(9) * 25 + 20)[:, None, None]
    stream = video.encode_frames(frames, fps=10)
    assert (stream.frames, stream.codec) == (9, "av1") and stream.keyframes[0] == 0
    got = video.decode(stream, [7, 0, 7, 3])
    assert np.abs(got[:, 0, 0, 0].astype(int) - [195, 20, 195, 95]).max() <= 3  # AV1: lossy, near
    with pytest.raises(rlarrow.InvalidInputError, match="even height"):
        video.encode_frames(np.zeros((2, 5, 6, 3), np.uint8), fps=10)


def test_a_copied_segment_decodes_to_the_originals_frames_exactly():
    from rlarrow.core import video
    from rlarrow.io.lerobot.videos import episode_video

    info = {"fps": 10, "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"}
    start = 0.0
    for e, n in enumerate(LENGTHS):
        ep = {
            "episode_index": e,
            "videos/observation.images.top/chunk_index": 0,
            "videos/observation.images.top/file_index": 0,
            "videos/observation.images.top/from_timestamp": start,
            "videos/observation.images.top/to_timestamp": start + n / 10,
        }
        original = episode_video(SRC, info, "observation.images.top", ep, n, (24, 32, 3))
        stream = video.remux_segment(MP4, start, start + n / 10, 10)
        assert stream.frames == n
        np.testing.assert_array_equal(video.decode(stream, range(n)), original)
        np.testing.assert_array_equal(video.decode(stream, [n - 1, 0]), original[[n - 1, 0]])
        assert len(stream.data) < MP4.stat().st_size
        start += n / 10


def test_the_kept_store_holds_streams_and_steps_without_the_camera(stores):
    kept, _ = stores
    store = rlarrow.Store.open(kept)
    assert store.manifest()["format_version"] == "1.4"
    videos = store.read("videos").sort_by("episode_id")
    assert videos.column("column").to_pylist() == ["observation.images.top"] * 3
    assert [len(s) for s in videos.column("steps").to_pylist()] == list(LENGTHS)
    assert set(videos.column("codec").to_pylist()) == {"av1"}
    obs = store.schema("steps").field("observation").type
    assert [f.name for f in obs] == ["state", "image"]  # the camera is in the videos table only


def test_reader_and_exports_decode_the_same_frames(stores, tmp_path):
    from rlarrow.core.dm_env_rows import DmEnvRows

    kept, decoded = stores
    with DmEnvRows(kept) as a, DmEnvRows(decoded) as b:
        for k in range(3):
            ta, tb = a.episode_table(k), b.episode_table(k)
            assert ta.column("observation").type == tb.column("observation").type
            assert ta.column("observation").to_pylist() == tb.column("observation").to_pylist()
            assert a.episode_table(k, ["step"]).column_names == ["step"]
    from rlarrow.io.rlds import export_rlds, import_rlds

    export_rlds(kept, tmp_path / "rlds")  # an export of the kept run: its frames, decoded
    import_rlds(tmp_path / "rlds", tmp_path / "back", progress=False)
    frames = to_numpy(
        rlarrow.Store.open(tmp_path / "back")
        .read("steps")
        .sort_by([("episode_id", "ascending"), ("step", "ascending")])
        .column("observation"),
        fill_value=0,
    )
    ref = to_numpy(
        rlarrow.Store.open(decoded)
        .read("steps")
        .sort_by([("episode_id", "ascending"), ("step", "ascending")])
        .column("observation"),
        fill_value=0,
    )
    np.testing.assert_array_equal(frames["images"]["top"], ref["images"]["top"])


def test_sql_decodes_a_frame_on_demand(stores):
    kept, decoded = stores
    got = rlarrow.sql(
        kept,
        "select episode_id, step, video_frame(run_id, episode_id, env_index, step, "
        "'observation.images.top') as f from steps order by 1, 2",
    )
    ref = (
        rlarrow.Store.open(decoded)
        .read("steps")
        .sort_by([("episode_id", "ascending"), ("step", "ascending")])
    )
    want = to_numpy(ref.column("observation"), fill_value=0)["images"]["top"]
    last = np.asarray(ref.column("is_last").to_numpy(zero_copy_only=False))
    for i, blob in enumerate(got.column("f").to_pylist()):
        if last[i]:
            assert blob is None  # (LeRobot keeps no frame after the last action)
        else:
            assert np.frombuffer(blob, np.uint8).reshape(24, 32, 3).tolist() == want[i].tolist()
    pixel = rlarrow.sql(
        kept,
        "select tensor_uint8_24x32x3(video_frame(run_id, episode_id, env_index, step, "
        "'observation.images.top'))[1][1] as p from steps where episode_id = 1 and step = 0",
    )
    assert pixel.column("p").to_pylist()[0] == want[LENGTHS[0] + 1][0, 0].tolist()


@pytest.mark.parametrize("workers", [0, 2])
def test_streaming_decodes_shuffled_windows_and_transitions(stores, workers):
    torch = pytest.importorskip("torch")
    from rlarrow.train.torch import StreamingDataset

    kept, decoded = stores

    def transitions(path, n):
        loader = torch.utils.data.DataLoader(
            StreamingDataset(path, "transitions", batch_size=4, shuffle=True, seed=3),
            batch_size=None,
            num_workers=n,
        )
        out = {}
        for batch in loader:
            for i in range(len(batch["reward"])):
                out[batch["observation"]["state"][i].numpy().tobytes()] = (
                    batch["observation"]["images"]["top"][i].numpy(),
                    batch["next_observation"]["images"]["top"][i].numpy(),
                    bool(batch["next_observation_is_pad"][i]),
                )
        return out

    a, b = transitions(kept, workers), transitions(decoded, 0)
    # every frame is a transition: each episode's last action too (it carries the final reward
    # and done), whose next observation LeRobot does not keep: masked, its frame the fill (black)
    # in both layouts, never a frame passed off as data (this was sum(LENGTHS) - 3, left out)
    assert a.keys() == b.keys() and len(a) == sum(LENGTHS)
    assert sum(pad for _, _, pad in a.values()) == sum(pad for _, _, pad in b.values()) == len(LENGTHS)
    for key, (obs, nxt, pad) in b.items():
        np.testing.assert_array_equal(a[key][0], obs)
        np.testing.assert_array_equal(a[key][1], nxt)
        assert a[key][2] == pad and (not pad or not nxt.any())
    windows = [
        w["observation"]["images"]["top"]
        for w in StreamingDataset(kept, "steps", columns=["observation"], sequence_length=3, batch_size=64)
    ]
    ref = [
        w["observation"]["images"]["top"]
        for w in StreamingDataset(decoded, "steps", columns=["observation"], sequence_length=3, batch_size=64)
    ]
    assert torch.equal(torch.cat(windows), torch.cat(ref))


def test_deleting_an_episode_deletes_its_streams(stores, tmp_path):
    kept, _ = stores
    shutil.copytree(kept, tmp_path / "s")
    store = rlarrow.Store.open(tmp_path / "s")
    run = store.runs().column("run_id")[0].as_py()
    store.delete(episodes=[(run, 1)])
    assert sorted(store.read("videos").column("episode_id").to_pylist()) == [0, 2]


def test_convert_keeps_video_and_a_damaged_file_is_refused(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "rlarrow", "convert", str(SRC), "-o", str(tmp_path / "s"), "--keep-video"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert rlarrow.Store.open(tmp_path / "s").row_count("videos") == 3
    from rlarrow.io.lerobot import import_lerobot

    shutil.copytree(SRC, tmp_path / "damaged")
    mp4 = tmp_path / "damaged" / MP4.relative_to(SRC)
    mp4.write_bytes(mp4.read_bytes()[: mp4.stat().st_size // 2])
    with pytest.raises(CorruptFileError, match="file-000.mp4"):
        import_lerobot(tmp_path / "damaged", tmp_path / "s2", video="keep", progress=False)
    assert not (tmp_path / "s2").exists() or rlarrow.Store.open(tmp_path / "s2").row_count("steps") == 0
    assert pc.sum(rlarrow.Store.open(tmp_path / "s").read("videos").column("episode_id")).as_py() == 3


def test_reader_steps_and_episode_columns_hold_the_camera(stores):
    kept, decoded = stores
    a, b = rlarrow.Reader(kept), rlarrow.Reader(decoded)
    for k in range(3):  # dm_env steps (Reader.episodes, the envlogger export) and episode columns
        for sa, sb in zip(a.episodes[k], b.episodes[k], strict=True):
            oa, ob = sa.timestep.observation, sb.timestep.observation
            assert (oa is None) == (ob is None)
            if oa is not None:
                np.testing.assert_array_equal(oa["images"]["top"], ob["images"]["top"])
        ca, cb = a.episode_columns(k), b.episode_columns(k)
        np.testing.assert_array_equal(ca["observation"]["images"]["top"], cb["observation"]["images"]["top"])
        np.testing.assert_array_equal(ca["observation"]["state"], cb["observation"]["state"])


def test_runs_with_other_cameras_are_not_batched_together(tmp_path):
    from rlarrow.io.lerobot import import_lerobot

    pytest.importorskip("torch")
    from rlarrow.train.torch import StreamingDataset

    other = tmp_path / "side"
    shutil.copytree(SRC, other)
    info = other / "meta" / "info.json"
    info.write_text(info.read_text().replace("observation.images.top", "observation.images.side"))
    (other / "videos" / "observation.images.top").rename(other / "videos" / "observation.images.side")
    episodes = other / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    import pyarrow.parquet as pq

    table = pq.read_table(episodes)
    pq.write_table(
        table.rename_columns([c.replace("images.top", "images.side") for c in table.column_names]), episodes
    )
    import_lerobot(SRC, tmp_path / "s", run_id="top", video="keep", progress=False)
    import_lerobot(other, tmp_path / "s", run_id="side", video="keep", progress=False)
    with pytest.raises(rlarrow.StoreError, match="other cameras"):
        list(StreamingDataset(tmp_path / "s", "steps", columns=["observation"], batch_size=4))
    got = list(
        StreamingDataset(
            tmp_path / "s",
            "steps",
            columns=["observation"],
            batch_size=64,
            filter=pc.field("run_id") == "side",
        )
    )
    assert "side" in got[0]["observation"]["images"]


def test_damaged_streams_and_v21_datasets(stores, tmp_path):
    from rlarrow.core import video
    from rlarrow.io.lerobot import import_lerobot

    kept, decoded = stores
    stream = video.VideoStream(b"not an mp4", [0, 1], "1/10", [0], "av1", 24, 32, 3)
    with pytest.raises(CorruptFileError, match="cannot be decoded"):
        video.decode(stream, [1])
    import_lerobot(FIXTURES / "lerobot" / "pusht_v21", tmp_path / "k21", video="keep", progress=False)
    import_lerobot(FIXTURES / "lerobot" / "pusht_v21", tmp_path / "d21", progress=False)
    a, b = rlarrow.Reader(tmp_path / "k21"), rlarrow.Reader(tmp_path / "d21")
    for k in range(3):
        np.testing.assert_array_equal(
            a.episode_columns(k)["observation"]["images"]["top"],
            b.episode_columns(k)["observation"]["images"]["top"],
        )
    with pytest.raises(Exception, match=r"\['x'\] is no video-layout field of the store \(its fields: none"):
        rlarrow.sql(decoded, "select video_frame(run_id, episode_id, env_index, step, 'x') as f from steps")
    with pytest.raises(Exception, match=r"its fields: \['observation.images.top'\]"):
        rlarrow.sql(kept, "select video_frame(run_id, episode_id, env_index, step, 'images.top') from steps")


def test_keep_flags_that_apply_to_no_input_are_refused(tmp_path):
    for flag, src in (("--keep-video", FIXTURES / "rlds" / "robot"), ("--keep-images-encoded", SRC)):
        done = subprocess.run(
            [sys.executable, "-m", "rlarrow", "convert", str(src), "-o", str(tmp_path / "s"), flag],
            capture_output=True,
            text=True,
        )
        assert done.returncode != 0 and "applies to" in done.stderr and "leave it out" in done.stderr, (
            done.stderr
        )


@pytest.mark.skipif(
    importlib.util.find_spec("lerobot") is None,
    reason="lerobot is not installed (make test installs it, with --no-deps: see the Makefile)",
)
def test_the_frames_are_lerobots_own(stores, tmp_path):
    import os

    kept, _ = stores
    out = tmp_path / "peer.npz"
    done = subprocess.run(
        [sys.executable, str(FIXTURES.parent / "io" / "lerobot_peer.py"), str(SRC), str(out)],
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = np.round(np.load(out)["observation.images.top"].transpose(0, 2, 3, 1) * 255).astype(np.uint8)
    reader = rlarrow.Reader(kept)  # (each episode's last step has no frame: LeRobot keeps none)
    ours = np.concatenate([reader.episode_columns(k)["observation"]["images"]["top"][:-1] for k in range(3)])
    np.testing.assert_array_equal(ours, theirs)  # LeRobotDataset's frames, exactly


def test_info_lists_video_fields_and_images_kept_encoded(stores, tmp_path):
    import json

    from click.testing import CliRunner

    from rlarrow.cli import cli
    from rlarrow.io.rlds import import_rlds

    kept, _ = stores
    text = CliRunner().invoke(cli, ["info", str(kept)]).output
    assert "steps.observation.images.top: uint8 (24, 32, 3) av1, 3 streams, 19 frames" in text
    assert "tensor_uint8_24x32x3(video_frame(" in text
    fields = json.loads(CliRunner().invoke(cli, ["info", str(kept), "--json"]).output)["video_fields"]
    assert fields == [
        {"column": "observation.images.top", "codec": "av1", "shape": [24, 32, 3], "streams": 3, "frames": 19}
    ]
    import_rlds(FIXTURES / "rlds" / "robot", tmp_path / "e", images="encoded", progress=False)
    text = CliRunner().invoke(cli, ["info", str(tmp_path / "e")]).output
    assert "steps.observation.wrist: bytes, one value a row" in text and "() list" not in text


def test_a_damaged_videos_file_is_named_by_sql_whatever_the_query_reads(stores, tmp_path):
    # connect reads the videos table's frame shapes for video_frame(): through the checked read,
    # so a damaged page there is an rlarrow error naming the file, never pyarrow's or a wrong shape
    import pyarrow.parquet as pq

    kept = tmp_path / "kept"
    shutil.copytree(stores[0], kept)
    store = rlarrow.Store.open(kept)
    path = store.files("videos")[0]
    meta = pq.ParquetFile(path).metadata
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    chunk = meta.row_group(0).column(names.index("height"))
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size - 2] ^= 0x5A  # (in the page's values)
    path.unlink()
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match=r"videos/part-"):
        rlarrow.sql(kept, "select count(*) as n from steps")
