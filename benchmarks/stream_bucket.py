"""Streaming from a bucket: ``StreamingDataset`` on ``s3://`` against the same store on disk and Lance.

A store of low-dimensional transitions, as D4RL's MuJoCo datasets hold them (``--steps`` steps
in episodes of 1,000: a float32[17] observation, a float32[6] action, reward, discount), is
written locally and pushed (:func:`rlarrow.core.remote.push`) to a real S3 server started by
this script: moto's server mode on 127.0.0.1, started with ``tests/s3_server.py`` (imported
from there: the tests and this script start it the same way). The same rows go to the same
server as a Lance dataset (``pylance``). Then, in one run, batches of 256, shuffled, seed 0:

- transitions (``observation, action, reward, discount, next_observation, done, truncated``):
  ``StreamingDataset(path, "transitions")`` from the local disk, ``StreamingDataset(uri,
  "transitions")`` from the bucket, and Lance reading the same rows from the same server
  with global shuffle by random access, the way the issue's anchor (LeRobot data on Lance,
  lancedb/docs#359) reads it (map-style: a permutation of the valid rows, each batch one
  ``LanceDataset.take`` of its rows and the rows after them);
- 16-step windows of ``observation`` and ``action`` (``sequence_length=16``), likewise; Lance
  takes the 16 consecutive rows of each sample (one ``take`` of 256 x 16 rows a batch).

rlarrow is timed over whole epochs of a fresh ``StreamingDataset`` in a fresh process: the
first (its files' footers fetched), then three more, the fastest reported (an epoch of a
shuffled stream reads a buffer, ``buffer_rows``, before its first batch, so a part of one
would not be its rate). Lance is timed over ``--lance-samples`` samples after its plan (its
rate per batch does not change along an epoch). Reported per path: samples/s, the ratios
bucket/local and bucket/Lance, the bytes the server sent per sample (a counting TCP relay in
a process of its own between the reader and the server, on another pass with the same seed:
rlarrow one whole epoch, footers included; Lance its takes, its keys read apart), and the
peak RSS of the process that read (``VmHWM``). The Lance dataset has the store's files' size
(250,000 rows a file, ``max_rows_per_file``) and Lance's default file format (2.1; at 200,000
steps transitions took 290, 474 and 320 samples/s with ``data_storage_version`` 2.0, 2.1 and
2.2). The goal (issue 38): the bucket at >= 50 % of the local disk's rate, and ahead of Lance.

Run: ``.venv/bin/python benchmarks/stream_bucket.py [--steps 1000000] [--lance-samples 1024]``
(the default, ``--steps 200000``, is a quick look of about two minutes).

Figures, ``--steps 1000000`` (4 files of one 250,000-row row group), retaken on the merged
main on a quiet machine (2026-11-29, the 2-core VM, nothing else running):

====================  =============  ============  ==========  ============  ================
path                  bucket         local disk    Lance       bytes/sample  peak RSS
====================  =============  ============  ==========  ============  ================
transitions           1.48M/s        1.77M/s       115/s       101 (Lance    751 MB (local
                      (0.84 of it)                             52,843)       609, Lance 269)
16-step windows       1.12M/s        0.94M/s       143/s       94 (Lance     731 MB (local
                      (1.19 of it)                             33,584)       597, Lance 273)
====================  =============  ============  ==========  ============  ================

A run under load (load average 6: other jobs on the two cores) gave 0.79 and 0.61 of the
local disk; one before it, busier still, gave 0.32 and 2.05 (one epoch timed each, not
the fastest of three): the ratio to the local disk moves with the load more than with the
reader. The quick default run gave 0.57 and 0.52 (one row group: nothing to read ahead).

What limits them:

- moto's server is Python on the same two cores as the reader: every byte it serves is CPU
  taken from decoding, so the bucket's rate here is bounded by the machine, not the network
  (on a real bucket the server's CPU is not the reader's). rlarrow fetches each needed column
  chunk of a row group once, in a few concurrent ranged requests (``pre_buffer``), each
  file's footer once, and two row groups ahead in threads while batches are taken.
- moto answers a ranged GET in a time that grows with the object's size (measured here: 58 ms
  for 4 KB of a 1 MB object, 195 ms for 4 KB of a 100 MB one, on the loaded machine). Lance's
  ``take`` of scattered rows makes many small ranged requests (and here fetched 34-53 KB per
  sample: whole pages of each column for a row), so on this server its rate is mostly moto's
  per-request cost; on S3 a request costs a round trip of tens of milliseconds, and Lance's
  rate would be higher. rlarrow's lead comes from reading row groups whole and shuffling
  them in the buffer (its global shuffle is of row groups, then of samples within
  ``buffer_rows``), against Lance's per-row random access.
- The bucket reader's peak RSS is the local one's plus about 150 MB: the two row groups read
  ahead (decoded) and their fetched column chunks. The bound is the sampler's buffer
  (``buffer_rows``, 524,288 samples) plus ``prefetch`` (2) row groups.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import select
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
BATCH = 256
WINDOW = 16
EPISODE = 1000
FILE_ROWS = 250_000  # rows per file, in the store (a commit each) and in the Lance dataset


# ---- the data


def generate(steps: int) -> Path:
    """A store of ``steps`` D4RL-like steps (made once under ``benchmarks/data/``)."""
    import pyarrow as pa

    import rlarrow
    from rlarrow.core.tensors import tensor_type

    path = DATA / f"bucket-{steps}"
    if (path / "_rlarrow_store.json").is_file():
        return path
    rng = np.random.default_rng(0)
    with rlarrow.Store.create(path) as st:
        st.declare("steps", {"observation": tensor_type(np.float32, (17,), layout="binary"),
                             "action": tensor_type(np.float32, (6,), layout="binary")})
        for lo in range(0, steps, FILE_ROWS):
            i = np.arange(lo, min(steps, lo + FILE_ROWS))
            n = len(i)
            step = i % EPISODE
            last = (step == EPISODE - 1) | (i == steps - 1)
            st.append("steps", rlarrow.core.schema.build("steps", {
                "run_id": "d4rl", "episode_id": i // EPISODE, "step": step, "env_index": 0,
                "observation": rng.standard_normal((n, 17)).astype(np.float32),
                "action": rng.standard_normal((n, 6)).astype(np.float32),
                "reward": pa.array(rng.standard_normal(n)), "discount": pa.array(np.ones(n)),
                "is_first": step == 0, "is_last": last, "is_terminal": np.zeros(n, dtype=bool)}))
    return path


def lance_table(path: Path) -> Any:
    """The store's steps as one Arrow table with plain fixed-size-list tensors (what Lance holds)."""
    import pyarrow as pa

    import rlarrow
    from rlarrow.core.tensors import to_numpy

    t = rlarrow.Store.open(path, readonly=True).read(
        "steps", ["episode_id", "step", "observation", "action", "reward", "discount", "is_last"])
    obs, act = to_numpy(t.column("observation")), to_numpy(t.column("action"))
    return pa.table({
        "episode_id": t.column("episode_id"), "step": t.column("step"),
        "observation": pa.FixedSizeListArray.from_arrays(pa.array(obs.reshape(-1)), 17),
        "action": pa.FixedSizeListArray.from_arrays(pa.array(act.reshape(-1)), 6),
        "reward": t.column("reward"), "discount": t.column("discount"), "is_last": t.column("is_last")})


def lance_options(env: dict[str, str]) -> dict[str, str]:
    """Lance's ``storage_options`` for the server in ``env`` (the standard AWS variables)."""
    return {"aws_endpoint": env["AWS_ENDPOINT_URL"], "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"], "aws_region": env["AWS_REGION"],
            "allow_http": "true"}


# ---- a relay that counts the bytes the server sends


def _relay(port: int, target: int, ready: Any, counted: Any) -> None:
    """Forward 127.0.0.1:``port`` to 127.0.0.1:``target``, adding the bytes sent back to ``counted``."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    listener.settimeout(1.0)
    parent = os.getppid()
    ready.set()

    def pump(client: socket.socket) -> None:
        server = socket.create_connection(("127.0.0.1", target))
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                readable, _, _ = select.select([client, server], [], [])
                for s in readable:
                    data = s.recv(1 << 20)
                    if not data:
                        return
                    (server if s is client else client).sendall(data)
                    if s is server:
                        with counted.get_lock():
                            counted.value += len(data)
        except OSError:
            return
        finally:
            client.close()
            server.close()

    while os.getppid() == parent:  # (the benchmark killed: gone too)
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        threading.Thread(target=pump, args=(conn,), daemon=True).start()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# ---- the readers, each in a fresh process


def _transitions_valid(ep: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Rows with a next row in their episode (a transition starts there)."""
    return np.flatnonzero(~last[:-1] & (ep[1:] == ep[:-1]))


def _window_starts(ep: np.ndarray, step: np.ndarray) -> np.ndarray:
    follows = (ep[1:] == ep[:-1]) & (step[1:] == step[:-1] + 1)
    breaks = np.concatenate([[0], np.cumsum(~follows)])
    n = len(ep)
    return np.flatnonzero(breaks[WINDOW - 1:] == breaks[: n - WINDOW + 1])


def read_rlarrow(where: str, kind: str, samples: int, epochs: int) -> dict[str, Any]:
    """``epochs`` epochs (at most ``samples`` samples each) of a fresh ``StreamingDataset``."""
    from _report import peak_rss_mb

    from rlarrow.train.torch import StreamingDataset

    if kind == "transitions":
        ds = StreamingDataset(where, "transitions", batch_size=BATCH, seed=0)
        shape = (17,)
    else:
        ds = StreamingDataset(where, columns=["observation", "action"], sequence_length=WINDOW,
                              batch_size=BATCH, seed=0)
        shape = (WINDOW, 17)
    # epoch 0 from the dataset's making (its files' footers read), then whole epochs, the
    # fastest reported (the machine is shared): an epoch of a shuffled stream reads a buffer
    # (buffer_rows) before its first batch, so a part of one would not be its rate
    times, counts = [], []
    t0 = time.perf_counter()
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        n = 0
        for batch in ds:
            assert tuple(batch["observation"].shape[1:]) == shape, batch["observation"].shape
            n += len(batch["observation"])
            if n >= samples:
                break
        times.append(time.perf_counter() - t0)
        counts.append(n)
        t0 = time.perf_counter()
    rates = [c / t for c, t in zip(counts, times, strict=True)]
    return {"rate": max(rates[1:] or rates), "first_epoch_rate": rates[0], "rss_mb": peak_rss_mb(),
            "samples": sum(counts)}


def read_lance(uri: str, kind: str, samples: int, env: dict[str, str],
               keys_env: dict[str, str]) -> dict[str, Any]:
    """``samples`` shuffled samples taken from a Lance dataset (its keys read through ``keys_env``)."""
    import lance
    from _report import peak_rss_mb

    t0 = time.perf_counter()
    # the keys a loader plans from (read apart: the counting pass counts the takes only)
    keys = lance.dataset(uri, storage_options=lance_options(keys_env)).to_table(
        columns=["episode_id", "step", "is_last"])
    ds = lance.dataset(uri, storage_options=lance_options(env))
    ep, step = keys.column("episode_id").to_numpy(), keys.column("step").to_numpy()
    last = keys.column("is_last").to_numpy(zero_copy_only=False)
    rng = np.random.default_rng(0)
    if kind == "transitions":
        starts = rng.permutation(_transitions_valid(ep, last))
        offsets = np.arange(2)
        columns = ["observation", "action", "reward", "discount", "is_last"]
    else:
        starts = rng.permutation(_window_starts(ep, step))
        offsets = np.arange(WINDOW)
        columns = ["observation", "action"]
    planned = time.perf_counter() - t0
    n, at = 0, 0
    t0 = time.perf_counter()
    while n < samples:
        if at + BATCH > len(starts):
            starts, at = rng.permutation(starts), 0
        which = starts[at:at + BATCH]
        at += BATCH
        got = ds.take((which[:, None] + offsets).reshape(-1), columns=columns)
        shape = (len(which), len(offsets))
        obs = np.asarray(got.column("observation").combine_chunks().values).reshape(*shape, 17)
        act = np.asarray(got.column("action").combine_chunks().values).reshape(*shape, 6)
        if kind == "transitions":
            batch = {"observation": obs[:, 0], "action": act[:, 0], "next_observation": obs[:, 1]}
        else:
            batch = {"observation": obs, "action": act}
        n += len(batch["observation"])
    seconds = time.perf_counter() - t0
    return {"rate": n / seconds, "plan_s": planned, "rss_mb": peak_rss_mb(), "samples": n}


def child(args: list[str]) -> None:
    """``--child READER WHERE KIND SAMPLES EPOCHS ENV KEYS_ENV``: one reader's figures, as JSON."""
    reader, where, kind, samples, epochs = args[0], args[1], args[2], int(args[3]), int(args[4])
    env, keys_env = json.loads(args[5]), json.loads(args[6])
    os.environ.update(env)
    if reader == "lance":
        out = read_lance(where, kind, samples, env, keys_env)
    else:
        out = read_rlarrow(where, kind, samples, epochs)
    print(json.dumps(out))


def _run(reader: str, where: str, kind: str, samples: int, epochs: int, env: dict[str, str],
         keys_env: dict[str, str]) -> dict[str, Any]:
    from _report import run_child

    return run_child(__file__, [reader, where, kind, str(samples), str(epochs), json.dumps(env),
                                json.dumps(keys_env)])


# ---- the run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--lance-samples", type=int, default=1_024, help="samples Lance takes, timed")
    parser.add_argument("--kinds", default="transitions,windows")
    parser.add_argument("--child", nargs=argparse.REMAINDER)
    ns = parser.parse_args()
    if ns.child:
        child(ns.child)
        return
    sys.path.insert(0, str(HERE.parent / "tests"))
    import lance
    import s3_server
    from _report import report

    from rlarrow.core.remote import push

    path = generate(ns.steps)
    server = s3_server.start()
    try:
        os.environ.update(server.env)
        uri = f"s3://{server.bucket}/bench/{path.name}"
        t0 = time.perf_counter()
        push(path, uri, progress=False)
        lance_uri = f"s3://{server.bucket}/bench/{path.name}.lance"
        lance.write_dataset(lance_table(path), lance_uri, storage_options=lance_options(server.env),
                            max_rows_per_file=FILE_ROWS)
        print(f"pushed the store and wrote the Lance dataset in {time.perf_counter() - t0:.1f} s", flush=True)
        # the counting relay: a second endpoint onto the same server
        port = _free_port()
        ctx = multiprocessing.get_context("spawn")
        counted, ready = ctx.Value("q", 0), ctx.Event()
        target = int(server.endpoint.rsplit(":", 1)[1])
        relay = ctx.Process(target=_relay, args=(port, target, ready, counted), daemon=True)
        relay.start()
        ready.wait(10)
        counting_env = {**server.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
        rows = []
        unbounded = 1 << 62
        for kind in ns.kinds.split(","):
            got: dict[str, dict[str, Any]] = {}
            for name, where in (("local", str(path)), ("bucket", uri)):
                got[name] = _run("rlarrow", where, kind, unbounded, 4, server.env, server.env)
                print(kind, name, got[name], flush=True)
            got["lance"] = _run("lance", lance_uri, kind, ns.lance_samples, 1, server.env, server.env)
            print(kind, "lance", got["lance"], flush=True)
            # the bytes the server sends: one epoch of a fresh StreamingDataset (footers
            # included), and Lance's takes of --lance-samples samples
            for name, reader, where, samples in (("bucket", "rlarrow", uri, unbounded),
                                                 ("lance", "lance", lance_uri, ns.lance_samples)):
                with counted.get_lock():
                    counted.value = 0
                out = _run(reader, where, kind, samples, 1, counting_env, server.env)
                got[name]["bytes"] = counted.value / out["samples"]
            print(kind, "bytes per sample: bucket", got["bucket"]["bytes"], "lance", got["lance"]["bytes"],
                  flush=True)
            local, bucket, lance_ = got["local"], got["bucket"], got["lance"]
            note = f"{ns.steps} steps, batch {BATCH}"
            rows += [
                {"path": f"{kind}: bucket vs local disk", "rlarrow": bucket["rate"], "peer": local["rate"],
                 "unit": "samples/s", "ratio": bucket["rate"] / local["rate"],
                 "note": f"{note}; fastest of epochs 2-4; goal >= 0.5; first epochs (footers read): "
                         f"{bucket['first_epoch_rate']:.0f} and {local['first_epoch_rate']:.0f}/s"},
                {"path": f"{kind}: bucket vs Lance (same server)", "rlarrow": bucket["rate"],
                 "peer": lance_["rate"], "unit": "samples/s", "ratio": bucket["rate"] / lance_["rate"],
                 "note": f"{note}; goal > 1; Lance: take() of shuffled rows, {lance_['samples']} samples"},
                {"path": f"{kind}: bytes from the server", "rlarrow": bucket["bytes"],
                 "peer": lance_["bytes"],
                 "unit": "B/sample", "ratio": bucket["bytes"] / lance_["bytes"],
                 "note": "through a counting relay: rlarrow one epoch, Lance its takes"},
                {"path": f"{kind}: peak RSS, bucket reader", "rlarrow": bucket["rss_mb"],
                 "peer": lance_["rss_mb"], "unit": "MB", "ratio": bucket["rss_mb"] / lance_["rss_mb"],
                 "note": f"local-disk reader: {local['rss_mb']:.0f} MB"},
            ]
        relay.terminate()
        report("stream_bucket", rows)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
