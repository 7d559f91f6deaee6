"""tfevents: reading 1,000,000 scalars to a table, and writing them, against the peers.

One event file of 1,000,000 ``simple_value`` scalars over 20 tags (about 59 MB, as torch's
``SummaryWriter.add_scalar`` lays them out) is generated once into ``benchmarks/data/``.
Each read path runs in its own process (peak RSS from ``VmHWM``); the figure is its first call
there (``--repeat`` more calls give a best-of in the note):

- rlarrow: ``TfeventsReader`` streaming batches into a pyarrow Table, both CRCs checked; and
  ``import_tfevents`` streaming them into a store (bounded memory);
- tbparse ``SummaryReader(...).scalars`` (a pandas DataFrame);
- TensorBoard's ``EventAccumulator`` with no sampling (``size_guidance`` 0), then every tag's
  ``Scalars``;
- plain framing without CRCs plus protobuf parsing (``event_pb2.Event.FromString``): the
  floor of a Python reader.

Writing: ``write_tfevents`` of the 1M-row table against torch's ``SummaryWriter.add_scalar``
loop (on 100,000 events, as events per second).

Run: ``.venv/bin/python benchmarks/tfevents_io.py`` (``--skip-slow-peers`` skips tbparse and
the EventAccumulator, about 45 s).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
N = 1_000_000
TAGS = 20


def generate(n: int = N) -> Path:
    """The event file: n scalars, tag after tag (train/... and update/...), step = i // 20."""
    path = DATA / f"tfevents_{n}" / "events.out.tfevents.1700000000.bench"
    if path.is_file():
        return path
    import numpy as np
    import pyarrow as pa

    from rlarrow.io.tfevents import EventFileWriter

    tags = [f"train/metric_{i:02d}" if i < 10 else f"update/loss/component_{i}" for i in range(TAGS)]
    rng = np.random.default_rng(0)
    i = np.arange(n)
    table = pa.table({
        "tag": pa.array(tags).take(pa.array(i % TAGS)),
        "step": i // TAGS,
        "value": rng.standard_normal(n).astype(np.float32).astype(np.float64),
        "wall_time": 1.7e9 + i * 0.01,
    })
    tmp = path.parent / ".tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    with EventFileWriter(tmp, wall_time=1.7e9) as w:
        w.write_batch(table)
    w.path.rename(path)
    tmp.rmdir()
    return path


# ---------------------------------------------------------------- child tasks


def task(name: str, path: str) -> int:
    import warnings

    warnings.simplefilter("ignore")
    if name == "rlarrow":
        from rlarrow.io.tfevents import read_tfevents

        return read_tfevents(path).num_rows
    if name == "rlarrow_import":
        import shutil

        from rlarrow.io.tfevents import import_tfevents

        store = Path(tempfile.mkdtemp(dir=DATA, prefix="store-"))
        try:
            return import_tfevents(path, store / "s", progress=False).scalars
        finally:
            shutil.rmtree(store)
    if name == "tbparse":
        from tbparse import SummaryReader

        return len(SummaryReader(path).scalars)
    if name == "event_accumulator":
        from tensorboard.backend.event_processing import event_accumulator as ea

        acc = ea.EventAccumulator(path, size_guidance={ea.SCALARS: 0})
        acc.Reload()
        return sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"])
    if name == "framing_protobuf":
        import struct

        from tensorboard.compat.proto import event_pb2

        data = Path(path).read_bytes()
        rows = 0
        pos = 0
        parse = event_pb2.Event.FromString
        while pos < len(data):
            (length,) = struct.unpack_from("<Q", data, pos)
            ev = parse(data[pos + 12: pos + 12 + length])
            rows += len(ev.summary.value)
            pos += length + 16
        return rows
    raise SystemExit(f"unknown task {name}")


def child(argv: list[str]) -> None:
    sys.path.insert(0, os.fspath(HERE))
    from _report import peak_rss_mb

    name, path, repeat = argv[0], argv[1], int(argv[2])
    import pyarrow as pa

    pa.array([0])  # pyarrow imports pandas (when installed) on its first array: once per process,
    # and before the timer, as tbparse and TensorBoard import theirs
    times, rows = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        rows = task(name, path)
        times.append(time.perf_counter() - t0)
    print(json.dumps({"seconds": times[0], "best": min(times), "rows": rows, "peak_rss_mb": peak_rss_mb()}))


def measure(name: str, path: Path, repeat: int) -> dict[str, float]:
    from _report import run_child

    result = run_child(__file__, [name, os.fspath(path), str(repeat)])
    print(f"  {name:<18} {result['seconds']:8.2f} s (best {result['best']:.2f})  {result['rows']:>9} rows  "
          f"peak RSS {result['peak_rss_mb']:6.0f} MB", file=sys.stderr)
    return result


def write_rates(path: Path, peer_events: int) -> tuple[float, float]:
    """Events per second: rlarrow's write_tfevents (all rows) and torch's add_scalar loop."""
    from rlarrow.io.tfevents import read_tfevents, write_tfevents

    table = read_tfevents(path)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        write_tfevents(table, d)
        ours = table.num_rows / (time.perf_counter() - t0)
    from torch.utils.tensorboard import SummaryWriter

    part = table.slice(0, peer_events)
    tags, steps, values = (part[c].to_pylist() for c in ("tag", "step", "value"))
    with tempfile.TemporaryDirectory() as d:
        w = SummaryWriter(d)
        t0 = time.perf_counter()
        for tag, step, value in zip(tags, steps, values, strict=True):
            w.add_scalar(tag, value, step)
        w.close()
        peer = peer_events / (time.perf_counter() - t0)
    return ours, peer


def main() -> None:
    sys.path.insert(0, os.fspath(HERE))
    from _report import report

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="best of N for the fast paths")
    parser.add_argument("--skip-slow-peers", action="store_true", help="skip tbparse and EventAccumulator")
    parser.add_argument("--peer-write-events", type=int, default=100_000)
    args = parser.parse_args()
    path = generate()
    print(f"{path.stat().st_size / 1e6:.0f} MB, {N} scalars over {TAGS} tags", file=sys.stderr)
    ours = measure("rlarrow", path, args.repeat)
    rows = []
    floor = measure("framing_protobuf", path, 1)
    rows.append({"path": "1M scalars -> table vs framing+protobuf (no CRC)", "rlarrow": ours["seconds"],
                 "peer": floor["seconds"], "unit": "s", "ratio": ours["seconds"] / floor["seconds"],
                 "note": f"first call in a fresh process; best of {args.repeat} {ours['best']:.2f} s; "
                         f"target <= 1.0 s with CRCs; peak RSS {ours['peak_rss_mb']:.0f} vs "
                         f"{floor['peak_rss_mb']:.0f} MB"})
    imp = measure("rlarrow_import", path, args.repeat)
    rows.append({"path": "1M scalars -> store (Parquet) vs framing+protobuf", "rlarrow": imp["seconds"],
                 "peer": floor["seconds"], "unit": "s", "ratio": imp["seconds"] / floor["seconds"],
                 "note": f"streaming: peak RSS {imp['peak_rss_mb']:.0f} MB"})
    if not args.skip_slow_peers:
        for name in ("tbparse", "event_accumulator"):
            peer = measure(name, path, 1)
            assert peer["rows"] == ours["rows"], (name, peer["rows"], ours["rows"])
            rows.append({"path": f"1M scalars -> table vs {name}", "rlarrow": ours["seconds"],
                         "peer": peer["seconds"], "unit": "s", "ratio": ours["seconds"] / peer["seconds"],
                         "note": f"speedup {peer['seconds'] / ours['seconds']:.0f}x"
                                 + (" (target >= 20x)" if name == "tbparse" else "")
                                 + f"; peak RSS {ours['peak_rss_mb']:.0f} vs {peer['peak_rss_mb']:.0f} MB"})
    w_ours, w_peer = write_rates(path, args.peer_write_events)
    rows.append({"path": "write scalars: write_tfevents vs SummaryWriter", "rlarrow": w_ours, "peer": w_peer,
                 "unit": "events/s", "ratio": w_ours / w_peer,
                 "note": f"speedup {w_ours / w_peer:.0f}x (target >= 10x)"})
    report("tfevents_io", rows)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    else:
        main()
