"""Store write/read cost against plain pyarrow Parquet of the same data (the peer).

What rlarrow adds on top of pyarrow: validation against the schema, conversion of NumPy
tensors to nested fixed-size lists, an fsync'd temporary file, a rename and an atomic
manifest update. This measures what that costs, and what buffering many small writes saves.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import best_of, report  # noqa: E402
from data import steps_columns  # noqa: E402

import rlarrow  # noqa: E402
from rlarrow.core import schema  # noqa: E402

N = 20_000  # steps with 84x84 uint8 frames: ~140 MB in memory


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="rlarrow-bench-"))
    try:
        cols = steps_columns("bench", N)
        table = schema.build("steps", cols)  # the same Arrow data for both sides
        mb = table.nbytes / 1e6

        def rl_write() -> None:
            shutil.rmtree(tmp / "s", ignore_errors=True)
            rlarrow.Store.create(tmp / "s").append("steps", table)

        def pa_write() -> None:
            pq.write_table(table, tmp / "plain.parquet", compression="zstd")

        def rl_build_and_write() -> None:
            shutil.rmtree(tmp / "s2", ignore_errors=True)
            rlarrow.Store.create(tmp / "s2").append("steps", cols)

        t_rl, t_pa = best_of(rl_write), best_of(pa_write)
        t_rl_np = best_of(rl_build_and_write)
        store = rlarrow.Store.open(tmp / "s")
        r_rl = best_of(lambda: store.read("steps"))
        r_pa = best_of(lambda: pq.read_table(tmp / "plain.parquet"))

        # Many small writes: one row at a time through a writer vs a ParquetWriter.
        small = [table.slice(i, 1) for i in range(2000)]

        def rl_small() -> None:
            shutil.rmtree(tmp / "s3", ignore_errors=True)
            with rlarrow.Store.create(tmp / "s3").writer("steps") as w:
                for piece in small:
                    w.write(piece)

        def pa_small() -> None:
            with pq.ParquetWriter(tmp / "small.parquet", table.schema, compression="zstd") as w:
                w.write_table(pa.concat_tables(small))

        s_rl, s_pa = best_of(rl_small), best_of(pa_small)
        size_rl = sum(p.stat().st_size for p in (tmp / "s" / "steps").glob("*.parquet"))
        size_pa = (tmp / "plain.parquet").stat().st_size
        report("store_io", [
            {"path": f"append Arrow table ({N} steps, {mb:.0f} MB)", "rlarrow": mb / t_rl,
             "peer": mb / t_pa, "unit": "MB/s", "ratio": t_pa / t_rl,
             "note": "peer: pq.write_table"},
            {"path": "append from NumPy columns (incl. conversion)", "rlarrow": mb / t_rl_np,
             "peer": mb / t_pa, "unit": "MB/s", "ratio": t_pa / t_rl_np},
            {"path": "read the table back", "rlarrow": mb / r_rl, "peer": mb / r_pa,
             "unit": "MB/s", "ratio": r_pa / r_rl, "note": "peer: pq.read_table"},
            {"path": "2000 one-row writes (TableWriter)", "rlarrow": 2000 / s_rl,
             "peer": 2000 / s_pa, "unit": "rows/s", "ratio": s_pa / s_rl,
             "note": "peer: one concat + write (no validation)"},
            {"path": "size on disk", "rlarrow": size_rl / 1e6, "peer": size_pa / 1e6,
             "unit": "MB", "ratio": size_rl / size_pa},
        ])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
