"""rlarrow.train.ray on a Ray cluster of two nodes started on this machine with ``ray start``.

The fixture starts a head (``ray start --head``) and a second node (``ray start --address=HEAD``),
each with one CPU, its own ports and temporary directory, connects with ``ray.init(address=...)``
and stops both, leaving no process behind (checked with ``ps``). The store is read through a
filesystem that logs every read by Ray node (``tests/counting_fs.py``): what each node fetched.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, episode_columns

import rlarrow

ray = pytest.importorskip("ray", reason="Ray Data is the optional extra 'ray': pip install 'rlarrow[ray]'")
from counting_fs import bytes_by_node, counting  # noqa: E402

import rlarrow.train.ray as rray  # noqa: E402
from rlarrow.core.remote import RemoteStore  # noqa: E402
from rlarrow.train.samples import SampleSource  # noqa: E402

pytestmark = pytest.mark.slow  # (a cluster of two nodes takes about 30 s to start on 2 shared cores)

LENGTHS = [9 + (e * 5) % 7 for e in range(24)]
TESTS = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _ports() -> list[str]:
    """Every port a node listens on, free ones (the defaults are fixed: two nodes here would clash)."""
    out = []
    for flag in ("--node-manager-port", "--object-manager-port", "--metrics-export-port",
                 "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port"):
        out += [flag, str(_free_port())]
    return out


def _ours(tmp: Path) -> list[str]:
    """The processes whose command line names the cluster's temporary directory."""
    listed = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in listed.splitlines() if str(tmp) in line and "ps -eo" not in line]


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes of one CPU each on this machine, the driver connected; both stopped afterwards."""
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED", "RAY_ADDRESS")}
    # (a token in ~/.ray turns token authentication on for `ray start` alone: off for all here)
    os.environ.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    tmp = Path(tempfile.mkdtemp(prefix="rlray", dir="/tmp"))  # (short: Ray's socket paths fit 107 bytes)
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    # the nodes' workers import this checkout's rlarrow and the tests' filesystem module
    paths = [str(REPO), str(TESTS), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    port = _free_port()
    common = ["--block", "--num-cpus=1", "--object-store-memory=100000000", "--disable-usage-stats"]
    logs = [open(tmp / "head.log", "w"), open(tmp / "node.log", "w")]  # noqa: SIM115 (closed at the end)
    head = subprocess.Popen(
        [ray_cli, "start", "--head", f"--port={port}", "--include-dashboard=false",
         f"--dashboard-port={_free_port()}", f"--ray-client-server-port={_free_port()}",
         f"--temp-dir={tmp}/head", *common, *_ports()],
        env=env, stdout=logs[0], stderr=subprocess.STDOUT, start_new_session=True)
    nodes = [head]
    try:
        address = f"{ray.util.get_node_ip_address()}:{port}"
        deadline = time.monotonic() + 120
        while "--block" not in (tmp / "head.log").read_text():  # (it says so once its processes run)
            assert head.poll() is None and time.monotonic() < deadline, (tmp / "head.log").read_text()
            time.sleep(0.5)
        nodes.append(subprocess.Popen(
            [ray_cli, "start", f"--address={address}", f"--temp-dir={tmp}/node", *common, *_ports()],
            env=env, stdout=logs[1], stderr=subprocess.STDOUT, start_new_session=True))
        ray.init(address=address, logging_level="error", log_to_driver=False)
        while len([n for n in ray.nodes() if n["Alive"]]) < 2:
            assert nodes[1].poll() is None and time.monotonic() < deadline, (tmp / "node.log").read_text()
            time.sleep(0.5)
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        yield {"address": address, "tmp": tmp}
    finally:
        ray.shutdown()
        for node in reversed(nodes):
            node.terminate()  # (`ray start --block` stops the node's processes as it exits)
        for node in reversed(nodes):
            try:
                node.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, 9)
        for _ in range(60):  # (the nodes' workers exit on their own, a moment later)
            if not _ours(tmp):
                break
            time.sleep(0.5)
        left = _ours(tmp)
        for log in logs:
            log.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        assert not left, f"processes of the cluster left running: {left}"
        shutil.rmtree(tmp, ignore_errors=True)  # (its logs, sockets and spilled objects)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """24 commits of an episode each (84x84 frames): 24 row groups, the units tasks read."""
    path = tmp_path_factory.mktemp("cluster") / "s.rlarrow"
    st = rlarrow.Store.create(path)
    for e, n in enumerate(LENGTHS):
        cols = episode_columns("r", e, n, image=False)
        grid = np.random.default_rng(e).integers(0, 255, (n + 1, 84, 84), dtype=np.uint8)
        cols["observation"]["grid"] = grid
        st.append("steps", cols)
    return path


def alive_nodes() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


def keys(dataset) -> Counter:
    got: Counter = Counter()
    for b in dataset.iter_batches(batch_size=256, batch_format="numpy"):
        e, s = b["episode_id"], b["step"]
        e, s = (e[:, 0], s[:, 0]) if e.ndim == 2 else (e, s)
        got.update(zip(e.tolist(), s.tolist(), strict=True))
    return got


def test_two_nodes_of_this_machine_are_one_cluster(cluster):
    assert len(alive_nodes()) == 2
    assert ray.cluster_resources()["CPU"] == 2


@pytest.mark.parametrize(("table", "length"), [("steps", 1), ("transitions", 1), ("steps", 4)])
def test_read_samples_delivers_every_sample_once_from_tasks_on_both_nodes(cluster, store, tmp_path, table,
                                                                           length):
    remote = RemoteStore(store, filesystem=counting(tmp_path / "reads"))
    columns = ["episode_id", "step", "observation"]
    ds = rray.read_samples(remote, table, columns=columns, sequence_length=length, shuffle=True, seed=3)
    window = 2 if table == "transitions" else length
    want = Counter((e, s) for e, n in enumerate(LENGTHS) for s in range(n + 2 - window))
    assert keys(ds) == want
    read = bytes_by_node(tmp_path / "reads", ".parquet")
    assert set(read) - {"driver"} == alive_nodes()  # tasks on both nodes read


def test_each_node_reads_only_its_share_of_the_bytes(cluster, store, tmp_path):
    """Per node, the bytes read through the filesystem: about half of what one reader of all reads."""
    columns = ["episode_id", "step", "observation"]
    alone = SampleSource.from_store(RemoteStore(store, filesystem=counting(tmp_path / "alone")), "steps",
                                    columns=columns)
    planned = bytes_by_node(tmp_path / "alone", ".parquet")["driver"]
    for unit in alone.units:
        files: dict = {}
        alone.read(unit, files)
        for f in files.values():
            f.close()
    whole = bytes_by_node(tmp_path / "alone", ".parquet")["driver"] - planned  # one reader, every row group
    remote = RemoteStore(store, filesystem=counting(tmp_path / "reads"))
    ds = rray.read_samples(remote, "steps", columns=columns)
    assert sum(keys(ds).values()) == sum(n + 1 for n in LENGTHS)
    read = bytes_by_node(tmp_path / "reads", ".parquet")
    per_node = {node: read[node] for node in alive_nodes()}
    print(f"bytes read: one reader of all {whole} (and {planned} of footers at planning); per node "
          f"{sorted(per_node.values())}")
    # every row group read once, in all: the row groups' bytes, and at most each file's footer again (a
    # task's process fetches the footers of the files it reads: the driver's are not shipped to it)
    assert whole * 0.98 < sum(per_node.values()) < (whole + planned) * 1.02
    # a share, never the whole store (Ray places the tasks: 26 % and 74 % in one run, so not halves)
    for node, got in per_node.items():
        assert 0.1 * (whole + planned) < got < 0.9 * (whole + planned), (node, got, whole, planned)


def test_the_multi_node_recipe_of_docs_scale_md(cluster, store, monkeypatch, tmp_path, capsys):
    """The Ray block of docs/scale.md's multi-node section, on the two nodes (RAY_ADDRESS: the head)."""
    text = (REPO / "docs" / "scale.md").read_text()
    section = text.split("## Many nodes", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```py\n(.*?)```", section, re.S)
    assert len(blocks) >= 1 and "ray.init()" in blocks[0]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_ADDRESS", cluster["address"])
    ray.shutdown()  # (the block connects itself, as a user's script does)
    block = blocks[0].replace('"s3://my-bucket/runs.rlarrow"', repr(str(store)))  # (the tests' store)
    exec(compile(block, "docs/scale.md", "exec"), {})  # noqa: S102 (the torch blocks: test_distributed.py)
    out = capsys.readouterr().out
    assert f"{sum(LENGTHS)} 2" in out.splitlines()  # every transition once, read on both nodes
