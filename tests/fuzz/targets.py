"""Fuzz targets: every importer, fed mutated real files, checked for what it imported.

A target takes the path of a (mutated) input and imports it. What may come out:

* an rlarrow error (:class:`rlarrow.core.errors.RLArrowError`, a clear message naming the file):
  the damage was found (*rejected*);
* a result equal to what the unmutated seed imports: the mutation hit bytes that do not
  carry values (padding, ignored metadata, a checksum-protected copy of something read
  elsewhere) (*equal*);
* a result that the importer itself announced as partial (a truncated last record, damaged
  parts skipped on request): every row it imported must be a row the seed imports (*partial*);
* a result whose rows are all the seed's, some repeated or missing, unannounced: the
  mutation repeated or cut out exactly one whole record of a record-framed file, which makes
  a valid file that no checksum can tell from the original (*reframed*);
* anything else is a failure: a crash, a foreign exception, damage to a store's earlier
  data, or values that differ from the seed's with no error (*different*): damage that went
  unnoticed. Only formats without checksums may import different values (:data:`NO_CHECKSUM`).

Importers that write run against a store that already holds a commit, which must come
through untouched.

Seeds are files the real tools write: rlarrow's exporters, which write skrl's bytes exactly
(pt, npz, csv), TensorBoard's event format and store Parquet, and the fixtures
(tests/fixtures) written by skrl, envlogger, Minari, torch and tianshou.

Used by ``test_fuzz.py`` (hypothesis drives the mutations) and ``run.py`` (a standalone loop
that reports, per importer, how many inputs were rejected, imported equal, partial, or
different).
"""

from __future__ import annotations

import atexit
import json
import random
import shutil
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import rlarrow
from rlarrow.core.errors import RLArrowError, TruncatedInputWarning

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


# ------------------------------------------------------------------ mutations


def mutate(data: bytes, ops: list[tuple[int, float, int]]) -> bytes:
    """Apply ``ops`` (kind, where in 0..1, value) to ``data``.

    Kinds: flip a bit, set a byte, truncate, insert, delete a run, repeat what came before,
    write a large 32-bit or a huge 64-bit length field.
    """
    out = bytearray(data)
    for kind, where, value in ops:
        if not out:
            break
        i = min(len(out) - 1, int(where * len(out)))
        k = kind % 8
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
        elif k == 6:
            out[i:i + 4] = (0xFFFFFFFF - value).to_bytes(4, "little")  # a large length field
        else:
            out[i:i + 8] = _HUGE[value % len(_HUGE)].to_bytes(8, "little")  # a huge 64-bit length
    return bytes(out)


_HUGE = (1 << 40, 1 << 62, 1 << 63, (1 << 64) - 1)


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
    from rlarrow.io.memory.csv import write_csv
    from rlarrow.io.memory.npz import write_npz
    from rlarrow.io.memory.pt import write_pt

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

    table = rlarrow.core.schema.build("scalars", {
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
    out["hdf5"] = sorted((FIXTURES / "hdf5").glob("*.hdf5"))
    out["rlds"] = [FIXTURES / "rlds" / "catch", FIXTURES / "rlds" / "robot"]
    out["lerobot"] = [FIXTURES / "lerobot" / "pusht_v30", FIXTURES / "lerobot" / "pusht_v21"]
    for variant, kind in SEED_KIND.items():
        out[variant] = out[kind]
    return {k: [p for p in v if p.exists()] for k, v in out.items()}


# ------------------------------------------------------------------ targets

#: Importers whose inputs carry no checksum over (all of) their values: damage there can
#: import as different values, and no reader could tell. csv is plain text; a Minari dataset
#: is Arrow IPC or Parquet written without page checksums, plus JSON (rlarrow checks what
#: Minari's metadata.json repeats: step counts, reward sums, episode count); a store's
#: Parquet files are written without page checksums.
NO_CHECKSUM = {
    "csv": "plain text: no checksum at all",
    "minari": "Arrow IPC and Parquet without page checksums, JSON metadata: values are not checksummed "
              "(step counts and reward sums are checked against metadata.json)",
    "lerobot": "Parquet written without page checksums, mp4 video (lossy, no checksum) and JSON: values "
               "are not checksummed (frame counts and index ranges are checked against the episodes' "
               "metadata)",
    "lerobot-video": "as lerobot; the mp4 packets are copied, not decoded, at import (a reader decodes them)",
    "rlds": "every record is CRC-32C checked, but dataset_info.json and features.json are plain JSON: a "
            "changed dtype or shape there reads the same bytes as other values",
    "hdf5": "HDF5 checksums its metadata (superblock v2+, object headers) but not raw data unless a file "
            "asks for the fletcher32 filter, which D4RL's and robomimic's writers do not",
}

#: Columns that differ between two imports of the same data (where and when).
_VOLATILE = {"created_at", "source_path"}
_TABLES = ("runs", "episodes", "steps", "scalars", "memory", "videos")

Fingerprint = dict[str, Counter[str]]


@dataclass
class Result:
    """What one target made of one input: what it imported, and whether it said it was partial."""

    fingerprint: Fingerprint
    partial: bool = False


def fingerprint(path: Path, *, skip_run: str | None = "before") -> Fingerprint:
    """Every row of a store's tables (but ``skip_run``'s), canonical, as a multiset per table."""
    out: Fingerprint = {}
    with rlarrow.Store.open(path, readonly=True) as st:
        for table in _TABLES:
            if table not in st.tables() or not st.row_count(table):
                continue
            rows = st.read(table).to_pylist()
            out[table] = Counter(
                repr(sorted((k, _canonical(k, v)) for k, v in row.items() if k not in _VOLATILE))
                for row in rows if skip_run is None or row.get("run_id") != skip_run)
    return {k: v for k, v in out.items() if v}


def _canonical(column: str, value: Any) -> Any:
    """JSON columns with their keys sorted (envlogger's metadata comes back in any order)."""
    if isinstance(value, str) and (column.startswith(("metadata", "env_specs"))):
        try:
            return json.dumps(json.loads(value), sort_keys=True)
        except ValueError:
            return value
    return value


_BASE: dict[str, Any] = {}


def _base_store(path: Path) -> tuple[rlarrow.Store, Any]:
    """A store holding one commit (at ``path``, open for writing), and a fingerprint of it.

    It is a copy of one made once per process: making it anew for each input was about a
    quarter of an input's CPU time, and the store holds no path of its own.
    """
    if not _BASE:
        root = Path(tempfile.mkdtemp(prefix="rlarrow-fuzz-base-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        with rlarrow.Store.create(root / "base") as st:
            run = st.add_run(source="user", run_id="before")
            st.append("scalars", {"run_id": run, "scope": "train", "tag": "x", "step": np.arange(5),
                                  "value": np.arange(5.0)})
            _BASE.update(path=root / "base", scalars=st.read("scalars"))
    shutil.copytree(_BASE["path"], path)
    return rlarrow.Store.open(path), _BASE["scalars"]


def _check_untouched(path: Path, before: Any) -> None:
    import pyarrow.compute as pc

    with rlarrow.Store.open(path) as st:
        now = st.read("scalars")
    kept = now.filter(pc.equal(now["run_id"], "before"))
    assert kept.equals(before), f"{path}: a failed import changed data committed before it"


def _convert(kind: str, *, skip: bool = False, keep: bool = False) -> Callable[[Path, Path], Result]:
    def target(path: Path, tmp: Path) -> Result:
        store = tmp / "s.rlarrow"
        st, before = _base_store(store)
        partial = False
        try:
            if kind == "memory":
                from rlarrow.io.memory.importer import import_memory

                import_memory([path], st, run_id="fuzz", num_envs=2, progress=False)
            elif kind == "tfevents":
                from rlarrow.io.tfevents import import_tfevents

                report = import_tfevents(path, st, run_id="fuzz", on_corrupt="skip" if skip else "raise",
                                         progress=False)
                partial = bool(report.corrupt or report.truncated)
            elif kind == "minari":
                from rlarrow.io.minari import import_minari

                import_minari(path, st, run_id="fuzz", progress=False)
            elif kind == "hdf5":
                from rlarrow.io.hdf5 import import_hdf5

                import_hdf5(path, st, run_id="fuzz", progress=False, chunk_bytes=2048)
            elif kind == "lerobot":
                from rlarrow.io.lerobot import import_lerobot

                import_lerobot(path, st, run_id="fuzz", progress=False, video="keep" if keep else "decode")
                if keep:  # the kept streams must decode (or say they cannot) where a reader reads them
                    from rlarrow.core.dm_env_rows import DmEnvRows

                    with DmEnvRows(st, run_id="fuzz") as rows:
                        for k in range(rows.num_episodes):
                            rows.episode_table(k)
            elif kind == "rlds":
                from rlarrow.io.rlds import import_rlds

                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    import_rlds(path, st, run_id="fuzz", progress=False)
                partial = any(issubclass(w.category, TruncatedInputWarning) for w in caught)
            else:
                from rlarrow.io.envlogger import import_envlogger

                env_report = import_envlogger(path, st, run_id="fuzz", progress=False, skip_corrupt=skip)
                partial = bool(env_report.skipped)
        finally:
            st.close()
            _check_untouched(store, before)
        return Result(fingerprint(store), partial)
    return target


def _store_target(path: Path, tmp: Path) -> Result:
    """A store with one of its files mutated (a part file, the manifest): open, read, query."""
    with rlarrow.Store.open(path, readonly=True) as st:
        for table in _TABLES:
            st.read(table)
    count = rlarrow.sql(path, "select count(*) from steps")
    got = fingerprint(path, skip_run=None)
    got["sql"] = Counter([repr(count.to_pylist() if hasattr(count, "to_pylist") else count)])
    return Result(got)


TARGETS: dict[str, Callable[[Path, Path], Result]] = {
    "pt": _convert("memory"), "npz": _convert("memory"), "csv": _convert("memory"),
    "tfevents": _convert("tfevents"), "tfevents-skip": _convert("tfevents", skip=True),
    "minari": _convert("minari"),
    "hdf5": _convert("hdf5"),
    "rlds": _convert("rlds"),
    "lerobot": _convert("lerobot"),
    "lerobot-video": _convert("lerobot", keep=True),
    "envlogger": _convert("envlogger"), "envlogger-skip": _convert("envlogger", skip=True),
    "store": _store_target,
}
#: The seeds each target is fed (the skip variants share their importer's).
SEED_KIND = {"tfevents-skip": "tfevents", "envlogger-skip": "envlogger", "lerobot-video": "lerobot"}

_SEED_RESULTS: dict[tuple[str, Path], Result] = {}


def seed_result(name: str, seed: Path) -> Result:
    """What ``name`` imports from the unmutated ``seed`` (computed once)."""
    key = (name, seed)
    if key not in _SEED_RESULTS:
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            path = mutated_copy(seed, Path(tmp), [], 0)
            _SEED_RESULTS[key] = TARGETS[name](path, Path(tmp))
    return _SEED_RESULTS[key]


def _subset(part: Fingerprint, whole: Fingerprint) -> bool:
    return all(not (rows - whole.get(table, Counter())) for table, rows in part.items())


def run_one(name: str, seed: Path, path: Path, tmp: Path) -> str:
    """Feed one input (``path``, a mutated copy of ``seed``) and judge what came out.

    Returns ``"rejected"`` (an rlarrow error that names the file), ``"equal"``, ``"partial"``
    (announced, and every row one the seed gives), ``"reframed"`` (not announced, every row
    one the seed gives, some more or less often: whole records repeated or cut out, see
    :func:`_same_rows`) or ``"different"`` (a value the seed does not hold). Anything else (a
    foreign exception, an error that names no file, a changed store) propagates.
    """
    expected = seed_result(name, seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # truncation and assumption warnings are expected here
        try:
            got = TARGETS[name](path, tmp)
        except RLArrowError as exc:
            named = path.name in str(exc) or path.is_dir()
            if not named:
                raise AssertionError(f"the error does not name the file: {exc}") from exc
            return "rejected"
    if got.fingerprint == expected.fingerprint:
        return "equal"
    announced = got.partial or any(issubclass(w.category, TruncatedInputWarning) for w in caught)
    if announced and _subset(got.fingerprint, expected.fingerprint):
        return "partial"
    if _same_rows(got.fingerprint, expected.fingerprint):
        return "reframed"
    return "different"


def _same_rows(got: Fingerprint, whole: Fingerprint) -> bool:
    """Whether every row of ``got`` is a row of ``whole`` (how often aside; runs must be equal).

    A mutation that repeats or removes exactly one whole record of a record-framed file
    (a TFRecord: length, CRC, bytes, CRC) makes a valid file holding the same records, one
    more or less often: no checksum can tell, and the values imported are the file's own.
    """
    return got.get("runs") == whole.get("runs") and all(
        set(rows) <= set(whole.get(table, Counter())) for table, rows in got.items())


def random_ops(rng: random.Random) -> list[tuple[int, float, int]]:
    """1 to 4 random mutations (see :func:`mutate`)."""
    return [(rng.randrange(8), rng.random(), rng.randrange(1 << 16)) for _ in range(rng.randint(1, 4))]
