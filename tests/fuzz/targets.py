"""Fuzz targets: every importer, fed mutated real files.

A target takes the path of a (mutated) input and imports it. What may come out is a
result or an rlarrow error (:class:`rlarrow.errors.RLArrowError`: a clear message naming the
file); anything else is a bug. Importers that write run against a store that already holds
a commit, which must come through untouched.

Seeds are files the real tools write: rlarrow's exporters, which write skrl's bytes exactly
(pt, npz, csv), TensorBoard's event format and store Parquet, and the fixtures in tests/fixtures
written by skrl, envlogger, Minari, torch and tianshou.

Used by ``test_fuzz.py`` (hypothesis drives the mutations) and ``run.py`` (a standalone loop
that reports how many inputs each importer was fed).
"""

from __future__ import annotations

import random
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import rlarrow
from rlarrow.errors import RLArrowError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


# ------------------------------------------------------------------ mutations


def mutate(data: bytes, ops: list[tuple[int, float, int]]) -> bytes:
    """Apply ``ops`` (kind, where in 0..1, byte) to ``data``: flips, sets, cuts, inserts, repeats."""
    out = bytearray(data)
    for kind, where, value in ops:
        if not out:
            break
        i = min(len(out) - 1, int(where * len(out)))
        k = kind % 7
        if k == 0:
            out[i] ^= 1 << (value % 8)  # one bit
        elif k == 1:
            out[i] = value % 256  # one byte
        elif k == 2:
            del out[i:]  # truncate
        elif k == 3:
            out[i:i] = bytes([value % 256]) * (1 + value % 16)  # insert
        elif k == 4:
            del out[i:i + 1 + value % 64]  # delete a run
        elif k == 5:
            out[i:i] = out[max(0, i - 1 - value % 64):i]  # repeat what came before
        else:
            out[i:i + 4] = (0xFFFFFFFF - value).to_bytes(4, "little")  # a large length field
    return bytes(out)


def mutated_copy(seed: Path, tmp: Path, ops: list[tuple[int, float, int]], pick: int = 0) -> Path:
    """A copy of ``seed`` (a file, or a directory with one of its files mutated)."""
    dest = tmp / seed.name
    if seed.is_dir():
        shutil.copytree(seed, dest)
        files = sorted(p for p in dest.rglob("*") if p.is_file())
        victim = files[pick % len(files)]
    else:
        shutil.copyfile(seed, dest)
        victim = dest
    victim.write_bytes(mutate(victim.read_bytes(), ops))
    return dest


# ------------------------------------------------------------------ seeds


def _memory(seeds: Path) -> dict[str, list[Path]]:
    from rlarrow.io.csv import write_csv
    from rlarrow.io.npz import write_npz
    from rlarrow.io.pt import write_pt

    rng = np.random.default_rng(0)
    tensors = {"states": rng.standard_normal((6, 2, 3)).astype(np.float32),
               "actions": rng.integers(0, 4, (6, 2, 1)).astype(np.int64),
               "terminated": rng.random((6, 2, 1)) < 0.3}
    tensors["states"][4:] = np.nan
    out: dict[str, list[Path]] = {"pt": [], "npz": [], "csv": []}
    for fmt, writer in (("pt", write_pt), ("npz", write_npz), ("csv", write_csv)):
        path = seeds / f"26-11-22_00-00-00-000000_memory_0x1.{fmt}"
        writer(tensors, path)
        out[fmt].append(path)
        out[fmt] += sorted((FIXTURES / "skrl").glob(f"*/memories/*.{fmt}"))
    return out


def _tfevents(seeds: Path) -> list[Path]:
    from rlarrow.io.tfevents import write_tfevents

    table = rlarrow.schema.build("scalars", {
        "run_id": "r", "scope": "train", "tag": ["train/loss"] * 20 + ["test/ret"] * 5,
        "step": np.arange(25), "value": np.linspace(-1, 1, 25), "wall_time": np.arange(25) * 0.5})
    directory = seeds / "tb"
    write_tfevents(table, directory)
    return [*directory.rglob("*tfevents*"), *sorted((FIXTURES / "tfevents").rglob("*tfevents*"))]


def _store_dir(seeds: Path) -> list[Path]:
    """A store written by rlarrow (every table): its files are what gets mutated."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from conftest import populate

    store = rlarrow.Store.create(seeds / "seed.rlarrow")
    populate(store)
    store.close()
    return [seeds / "seed.rlarrow"]


def seeds(directory: Path) -> dict[str, list[Path]]:
    """Seed inputs per importer (``directory`` holds the generated ones)."""
    directory.mkdir(parents=True, exist_ok=True)
    out = _memory(directory)
    out["tfevents"] = _tfevents(directory)
    out["store"] = _store_dir(directory)
    out["minari"] = [p for p in (FIXTURES / "minari" / "cartpole").glob("*-v0") if p.is_dir()]
    out["envlogger"] = [p for p in (FIXTURES / "envlogger").glob("*") if p.is_dir()]
    return {k: [p for p in v if p.exists()] for k, v in out.items()}


# ------------------------------------------------------------------ targets


def _base_store(path: Path) -> tuple[rlarrow.Store, Any]:
    """A store holding one commit, and a fingerprint of it."""
    st = rlarrow.Store.create(path)
    run = st.add_run(source="user", run_id="before")
    st.append("scalars", {"run_id": run, "scope": "train", "tag": "x", "step": np.arange(5),
                          "value": np.arange(5.0)})
    return st, st.read("scalars")


def _check_untouched(path: Path, before: Any) -> None:
    import pyarrow.compute as pc

    with rlarrow.Store.open(path) as st:
        now = st.read("scalars")
    kept = now.filter(pc.equal(now["run_id"], "before"))
    assert kept.equals(before), f"{path}: a failed import changed data committed before it"


def _convert(kind: str) -> Callable[[Path, Path], Any]:
    def target(path: Path, tmp: Path) -> Any:
        store = tmp / "s.rlarrow"
        st, before = _base_store(store)
        try:
            if kind == "memory":
                from rlarrow.convert import convert_memory

                return convert_memory([path], st, num_envs=2, progress=False)
            if kind == "tfevents":
                from rlarrow.io.tfevents import import_tfevents

                return import_tfevents(path, st, progress=False)
            if kind == "minari":
                from rlarrow.io.minari import import_minari

                return import_minari(path, st, progress=False)
            from rlarrow.io.envlogger import import_envlogger

            return import_envlogger(path, st, progress=False)
        finally:
            st.close()
            _check_untouched(store, before)
    return target


def _store_target(path: Path, tmp: Path) -> Any:
    """A store with one of its files mutated (a part file, the manifest): open, read, query."""
    with rlarrow.Store.open(path, readonly=True) as st:
        for table in ("runs", "episodes", "steps", "scalars", "memory"):
            st.read(table)
    return rlarrow.sql(path, "select count(*) from steps")


TARGETS: dict[str, Callable[[Path, Path], Any]] = {
    "pt": _convert("memory"), "npz": _convert("memory"), "csv": _convert("memory"),
    "tfevents": _convert("tfevents"), "minari": _convert("minari"), "envlogger": _convert("envlogger"),
    "store": _store_target,
}


def run_one(name: str, path: Path, tmp: Path) -> str:
    """Feed one input; returns 'ok' or the rlarrow error's class name. Other errors propagate."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # truncation and assumption warnings are expected here
        try:
            TARGETS[name](path, tmp)
        except RLArrowError as exc:
            named = path.name in str(exc) or path.is_dir()
            if not named:
                raise AssertionError(f"the error does not name the file: {exc}") from exc
            return type(exc).__name__
    return "ok"


def random_ops(rng: random.Random) -> list[tuple[int, float, int]]:
    return [(rng.randrange(7), rng.random(), rng.randrange(1 << 16)) for _ in range(rng.randint(1, 4))]
