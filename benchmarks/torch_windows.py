"""Sequence windows into PyTorch: ``StreamingDataset(sequence_length=L)`` against in-memory gathering.

Sequence models (recurrent policies, transformers, diffusion policies, action chunking) train
on windows of L consecutive steps of one episode. A store is written once per size into
``benchmarks/data/`` as a recorder leaves it: episodes of 200 to 1,000 steps (a float32[32]
observation, a float32[8] action that is null at each episode's last step), committed in
chunks that split episodes between commits. For each store size (1M, 10M steps) and window
length (16, 64, 256), each in its own process (peak RSS from ``VmHWM``):

- rlarrow: ``StreamingDataset(path, columns=["observation", "action"], sequence_length=L,
  batch_size=256, shuffle=True)``, in this process and through ``rlarrow.train.torch.DataLoader``
  with 2 workers (L = 16 and 64 on the largest store);
- ``delta_steps={"observation": [-1, 0], "action": range(16)}`` (LeRobot's
  ``delta_timestamps`` in steps: every step a sample, an action chunk of 16), on the largest
  store, against the same clamped gather with pad masks from in-memory tensors;
- peer: the same two columns held in memory as torch tensors, the valid window starts
  (L steps inside one episode) permuted, and each batch gathered with one index
  (``obs[starts[:, None] + arange(L)]``): the ceiling of any loader.

rlarrow is timed over ``--windows`` windows after as many (steady, as every later epoch of a
persistent loader runs), and the first ``--windows`` are reported too (a fresh process's or
worker's first pass, its memory faulted in page by page); the peer over ``--windows``. Batches
of 256, shapes checked. The target: rlarrow at >= 50 % of the peer's windows/s, peak RSS under
2 GB whatever L and the store's size, and 2 workers faster than one process.

Run: ``.venv/bin/python benchmarks/torch_windows.py [--sizes 1000000] [--lengths 16]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
BATCH = 256


def generate(rows: int) -> Path:
    """A recorder-like store of ``rows`` steps (made once)."""
    import pyarrow as pa

    import rlarrow
    from rlarrow.core.tensors import tensor_type, to_arrow, with_null_rows

    path = DATA / f"windows-{rows}"
    if (path / "_rlarrow_store.json").is_file():
        return path
    rng = np.random.default_rng(0)
    lengths = rng.integers(200, 1001, rows // 200 + 2)
    ends = np.cumsum(lengths)
    ends = ends[: np.searchsorted(ends, rows) + 1]
    ends[-1] = rows
    episode = np.repeat(np.arange(len(ends)), np.diff(np.concatenate([[0], ends])))
    first = np.concatenate([[0], ends[:-1]])
    step = np.arange(rows) - first[episode]
    last = np.zeros(rows, dtype=bool)
    last[ends - 1] = True
    action_type = tensor_type(np.float32, (8,), layout="binary")
    with rlarrow.Store.create(path) as st:
        st.declare("steps", {"observation": tensor_type(np.float32, (32,), layout="binary"),
                             "action": action_type})
        chunk = 250_000
        for lo in range(0, rows, chunk):
            hi = min(rows, lo + chunk)
            n = hi - lo
            end = last[lo:hi]
            # a recorder's last row of an episode has no action
            action = to_arrow(rng.standard_normal((n, 8)).astype(np.float32), action_type)
            action = with_null_rows(action, end)
            st.append("steps", rlarrow.core.schema.build("steps", {
                "run_id": "bench", "episode_id": episode[lo:hi], "step": step[lo:hi], "env_index": 0,
                "observation": rng.standard_normal((n, 32)).astype(np.float32),
                "action": action,
                "reward": pa.array(rng.standard_normal(n), mask=end),
                "discount": pa.array(np.ones(n), mask=end),
                "is_first": step[lo:hi] == 0, "is_last": end,
                "is_terminal": end & (rng.random(n) < 0.5)}))
    return path


def _load(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """observation, action (nulls as NaN) and each row's episode-contiguous run length."""
    import pyarrow.parquet as pq

    import rlarrow
    from rlarrow.core.tensors import to_numpy

    files = rlarrow.Store.open(path, readonly=True).files("steps")
    obs, act, ep, st = [], [], [], []
    for f in files:
        t = pq.read_table(f, columns=["observation", "action", "episode_id", "step"])
        obs.append(to_numpy(t.column("observation")))
        act.append(to_numpy(t.column("action"), fill_value=np.nan))
        ep.append(t.column("episode_id").to_numpy())
        st.append(t.column("step").to_numpy())
    return np.concatenate(obs), np.concatenate(act), np.stack([np.concatenate(ep), np.concatenate(st)])


def child_peer(path: Path, L: int, windows: int) -> dict[str, float]:
    import torch
    from _report import peak_rss_mb

    obs_np, act_np, keys = _load(path)
    ep, step = keys
    follows = (ep[1:] == ep[:-1]) & (step[1:] == step[:-1] + 1)
    breaks = np.concatenate([[0], np.cumsum(~follows)])  # windows from s are whole when no break inside
    n = len(ep)
    starts = np.flatnonzero(breaks[L - 1:] == breaks[: n - L + 1]) if n >= L else np.array([], dtype=np.int64)
    obs, act = torch.from_numpy(obs_np), torch.from_numpy(act_np)
    offsets = torch.arange(L)
    perm = torch.from_numpy(starts[np.random.default_rng(0).permutation(len(starts))])
    todo = min(windows, len(starts))
    t0 = time.perf_counter()
    for i in range(0, todo, BATCH):
        idx = perm[i:i + BATCH, None] + offsets
        o, a = obs[idx], act[idx]
    seconds = time.perf_counter() - t0
    assert o.shape[1:] == (L, 32) and a.shape[1:] == (L, 8)
    return {"rate": todo / seconds, "rss_mb": peak_rss_mb(), "windows_in_store": len(starts)}


DELTAS = {"observation": [-1, 0], "action": list(range(16))}  # LeRobot's ACT / diffusion-policy kind


def child_peer_delta(path: Path, samples: int) -> dict[str, float]:
    """In memory: every step a sample, offsets clamped to its episode, pad masks (LeRobot's rule)."""
    import torch
    from _report import peak_rss_mb

    obs_np, act_np, keys = _load(path)
    ep, step = keys
    n = len(ep)
    new = np.concatenate([[True], (ep[1:] != ep[:-1]) | (step[1:] != step[:-1] + 1)])
    first = np.flatnonzero(new)
    chain = np.cumsum(new) - 1
    lo = torch.from_numpy(first[chain])
    hi = torch.from_numpy(np.concatenate([first[1:] - 1, [n - 1]])[chain])
    obs, act = torch.from_numpy(obs_np), torch.from_numpy(act_np)
    d_obs, d_act = torch.tensor(DELTAS["observation"]), torch.tensor(DELTAS["action"])
    perm = torch.from_numpy(np.random.default_rng(0).permutation(n))
    todo = min(samples, n)
    t0 = time.perf_counter()
    for i in range(0, todo, BATCH):
        s = perm[i:i + BATCH]
        low, high = lo[s, None], hi[s, None]
        at_o, at_a = s[:, None] + d_obs, s[:, None] + d_act
        o, a = obs[torch.clamp(at_o, low, high)], act[torch.clamp(at_a, low, high)]
        pads = ((at_o < low) | (at_o > high), (at_a < low) | (at_a > high))
    seconds = time.perf_counter() - t0
    assert o.shape[1:] == (2, 32) and a.shape[1:] == (16, 8) and pads[1].shape[1:] == (16,)
    return {"rate": todo / seconds, "rss_mb": peak_rss_mb()}


def child_ours(path: Path, L: int, windows: int, workers: int) -> dict[str, float]:
    from _report import peak_rss_mb

    from rlarrow.train.torch import DataLoader, StreamingDataset

    if L:
        ds = StreamingDataset(path, columns=["observation", "action"], sequence_length=L, batch_size=BATCH,
                              seed=0)
    else:  # L == 0: delta_steps
        ds = StreamingDataset(path, columns=["observation", "action"], delta_steps=DELTAS, batch_size=BATCH,
                              seed=0)
    loader = DataLoader(ds, num_workers=workers) if workers else ds

    def epochs():  # noqa: ANN202 - as a training loop runs them (a small store ends an epoch early)
        epoch = 0
        while True:
            ds.set_epoch(epoch)
            yield from loader
            yield None  # (an epoch's end)
            epoch += 1

    # the first pass (``windows``, or the first epoch when shorter: a fresh process's or
    # worker's memory is faulted in page by page), then ``windows`` more (steady, as every
    # later epoch of a persistent loader)
    n, first, t1 = 0, 0, 0.0
    t0 = time.perf_counter()
    for batch in epochs():
        if batch is None or (not first and n >= windows):
            if not first:
                first, t1 = n, time.perf_counter()
            if batch is None:
                continue
        n += len(batch["observation"])
        shape = (tuple(batch["observation"].shape[1:]), tuple(batch["action"].shape[1:]))
        if first and n - first >= windows:
            break
    t2 = time.perf_counter()
    want = ((L, 32), (L, 8)) if L else ((2, 32), (16, 8))
    assert shape == want, shape
    return {"first": first / (t1 - t0), "rate": (n - first) / (t2 - t1), "rss_mb": peak_rss_mb(),
            "windows": n - first}


def main() -> None:
    sys.path.insert(0, os.fspath(HERE))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--lengths", default="16,64,256", help="window lengths (empty: none)")
    parser.add_argument("--windows", type=int, default=2_000_000, help="windows timed per run (L <= 64)")
    parser.add_argument("--child", nargs="*")
    parser.add_argument("--no-deltas", dest="deltas", action="store_false", help="skip the delta_steps rows")
    args = parser.parse_args()
    if args.child is not None:
        who, path, L, windows, workers = args.child
        if who == "peer":
            out = (child_peer(Path(path), int(L), int(windows)) if int(L)
                   else child_peer_delta(Path(path), int(windows)))
        else:
            out = child_ours(Path(path), int(L), int(windows), int(workers))
        print(json.dumps(out))
        return
    from _report import report, run_child

    sizes = [int(s) for s in args.sizes.split(",")]
    lengths = [int(s) for s in args.lengths.split(",") if s]
    rows = []
    for size in sizes:
        path = generate(size)
        for L in lengths:
            todo = args.windows if L <= 64 else args.windows // 4
            peer = run_child(__file__, ["peer", os.fspath(path), str(L), str(todo), "0"])
            ours = run_child(__file__, ["ours", os.fspath(path), str(L), str(todo), "0"])
            rows.append({"path": f"windows L={L}, {size:,} steps, in-process", "rlarrow": ours["rate"],
                         "peer": peer["rate"], "unit": "windows/s", "ratio": ours["rate"] / peer["rate"],
                         "note": f"target >= 0.5 of in-memory gather; peak RSS {ours['rss_mb']:.0f} MB "
                                 f"(target < 2048; in-memory {peer['rss_mb']:.0f} MB); "
                                 f"{ours['windows']:,} windows after as many (first pass "
                                 f"{ours['first']:,.0f}/s)"})
            print(rows[-1], flush=True)
            if size == max(sizes) and L <= 64:
                two = run_child(__file__, ["ours", os.fspath(path), str(L), str(todo), "2"])
                rows.append({"path": f"windows L={L}, {size:,} steps, DataLoader 2 workers",
                             "rlarrow": two["rate"], "peer": ours["rate"], "unit": "windows/s",
                             "ratio": two["rate"] / ours["rate"],
                             "note": f"peer: rlarrow in-process; target >= 1; main-process peak RSS "
                                     f"{two['rss_mb']:.0f} MB; first pass {two['first']:,.0f}/s "
                                     f"({two['first'] / ours['first']:.2f}x in-process's)"})
                print(rows[-1], flush=True)
    if args.deltas:
        path = generate(max(sizes))
        peer = run_child(__file__, ["peer", os.fspath(path), "0", str(args.windows), "0"])
        for workers in (0, 2):
            ours = run_child(__file__, ["ours", os.fspath(path), "0", str(args.windows), str(workers)])
            how = "in-process" if not workers else "DataLoader 2 workers"
            what = f"delta_steps {DELTAS['observation']} obs, 0..15 action, {max(sizes):,} steps, {how}"
            rows.append({"path": what,
                         "rlarrow": ours["rate"], "peer": peer["rate"], "unit": "samples/s",
                         "ratio": ours["rate"] / peer["rate"],
                         "note": f"target >= 0.5; peer: the same clamped gather and pad masks from in-memory "
                                 f"tensors (LeRobot's rule); peak RSS {ours['rss_mb']:.0f} MB; first pass "
                                 f"{ours['first']:,.0f}/s"})
            print(rows[-1], flush=True)
    report("torch_windows", rows)


if __name__ == "__main__":
    main()
