"""Every exported file name stays inside ``-o``, whatever names the store holds (issue 36).

A merged or planted store may hold a memory snapshot whose name is a path (``../../x``): the
memory export names its files after the snapshots, so such a name is refused before anything
is written, and nothing appears outside the target.
"""

from __future__ import annotations

import numpy as np
import pytest

import rlarrow
from rlarrow.io.memory.importer import export_memory
from rlarrow.io.memory.snapshot import MemorySnapshot


@pytest.mark.parametrize("name", ["../../outside/x", "/tmp/abs", "a\\b", ".."])
@pytest.mark.parametrize("fmt", ["pt", "npz", "csv", "parquet"])
def test_a_snapshot_name_that_is_a_path_is_refused_and_nothing_is_written_outside(tmp_path, name, fmt):
    with rlarrow.Store.create(tmp_path / "store") as st:
        snap = MemorySnapshot({"states": np.arange(6, dtype=np.float32).reshape(3, 1, 2)}, name=name)
        st.append("memory", snap.to_table(run_id="r", snapshot_id=0))
    out = tmp_path / "deep" / "er" / "out"
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(rlarrow.InvalidInputError, match="memory snapshot name.*run_id"):
        export_memory(tmp_path / "store", out, fmt=fmt, progress=False)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_writer_in_a_child_imports_nothing_from_the_current_directory(tmp_path, monkeypatch):
    # the HDF5 exports write in a child interpreter: a module in the user's directory (a
    # downloaded dataset's rlarrow.py or h5py.py, say) must not be imported there
    from rlarrow.core.targets import in_child

    marker = tmp_path / "imported"
    (tmp_path / "rlarrow.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit(3)\n")
    monkeypatch.chdir(tmp_path)
    assert in_child(tmp_path / "target", divmod, 7, 2, what="a test") == (3, 1)
    assert not marker.exists()


def _dead_pid() -> str:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()


def test_an_export_still_running_elsewhere_keeps_its_temporary_files(tmp_path):
    # the pid of an export on another host means nothing here: its lock (flock) says it runs
    import os
    import subprocess
    import sys
    import time

    from rlarrow.core.targets import sweep_leftovers

    token = f"{_dead_pid()}-0123abcd"
    leftover = tmp_path / f".out.rlarrow-new-{token}"
    leftover.mkdir()
    lock = tmp_path / f".rlarrow-live-{token}"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        hour_ago = time.time() - 7200
        os.utime(leftover, (hour_ago, hour_ago))
        assert sweep_leftovers(tmp_path) == [] and leftover.is_dir()  # held: running
    finally:
        holder.kill()
        holder.communicate()
    assert sweep_leftovers(tmp_path) == [leftover] and not leftover.exists() and not lock.exists()


def test_a_kill_between_the_two_renames_puts_the_old_target_back(tmp_path):
    from rlarrow.core.targets import fresh_directory

    token = f"{_dead_pid()}-4567abcd"
    (tmp_path / f".out.rlarrow-old-{token}").mkdir()  # the old target, moved aside
    (tmp_path / f".out.rlarrow-old-{token}" / "kept.txt").write_text("what the user had")
    (tmp_path / f".out.rlarrow-new-{token}").mkdir()  # the new one, not yet moved in
    (tmp_path / f".rlarrow-live-{token}").touch()  # its lock, free: the export was killed
    with fresh_directory(tmp_path / "other", overwrite=False, what="a test") as tmp:
        (tmp / "x").write_text("x")
    assert (tmp_path / "out" / "kept.txt").read_text() == "what the user had"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "out"]
