"""HDF5 imports (D4RL, robomimic, Minari's HDF5 backend) read nothing outside the input, and do bounded work.

Every hostile file is written here by h5py: an external link, a virtual dataset (VDS) and
external raw storage that lead into a *canary* directory outside the input, and a "sparse
bomb" (datasets declared millions of rows long, chunked, never written: a few KB of file).
Each is refused with an rlarrow error naming the file, the dataset and what to do; under
strace (``tests/hostile.py``) ``rlarrow convert`` of each never touches the canary and exits
non-zero without a traceback. ``--allow-hdf5-links`` (``allow_hdf5_links=True``) lets links to
files beside the input through, and nothing else.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, REPO
from hostile import needs_strace, traced

import rlarrow
from rlarrow.core.errors import InvalidInputError
from rlarrow.core.tensors import to_numpy

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("h5py") is None, reason="HDF5 import needs h5py: pip install 'rlarrow[hdf5]'"
)

ROWS = 10
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.fixture
def canary(tmp_path):
    """A directory outside every input: an HDF5 file and raw bytes a hostile input points at."""
    import h5py

    out = tmp_path / "canary"
    out.mkdir()
    with h5py.File(out / "secret.h5", "w") as f:
        f["x"] = np.arange(ROWS * 2, dtype=np.float32).reshape(ROWS, 2) + 1000
    (out / "raw.bin").write_bytes(np.full((ROWS, 2), 7.0, np.float32).tobytes())
    return out


def d4rl(path: Path, actions=None) -> Path:
    """A small D4RL file; ``actions(f)`` makes its ``actions`` (default: values in the file)."""
    import h5py

    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f["observations"] = np.arange(ROWS * 3, dtype=np.float32).reshape(ROWS, 3)
        f["rewards"] = np.ones(ROWS, np.float32)
        terminals = np.zeros(ROWS, bool)
        terminals[-1] = True
        f["terminals"] = terminals
        if actions is None:
            f["actions"] = np.zeros((ROWS, 2), np.float32)
        else:
            actions(f)
    return path


def external_link(target: str):
    def make(f):
        import h5py

        f["actions"] = h5py.ExternalLink(target, "/x")

    return make


def virtual(target: str):
    def make(f):
        import h5py

        layout = h5py.VirtualLayout(shape=(ROWS, 2), dtype="f4")
        layout[:] = h5py.VirtualSource(target, "x", shape=(ROWS, 2))
        f.create_virtual_dataset("actions", layout)

    return make


def external_storage(target: str):
    def make(f):
        f.create_dataset("actions", shape=(ROWS, 2), dtype="f4", external=[(target, 0, ROWS * 8)])

    return make


def sparse_bomb(path: Path) -> Path:
    """D4RL's four datasets declared 3M rows long, chunked, never written: about 2.5 KB of file."""
    import h5py

    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        for key, shape in (("observations", (3_000_000, 3)), ("actions", (3_000_000, 2)),
                           ("rewards", (3_000_000,)), ("terminals", (3_000_000,))):
            f.create_dataset(key, shape=shape, dtype="f4", chunks=(min(shape[0], 100_000), *shape[1:]))
    return path


def hostile_files(tmp_path: Path, canary: Path) -> dict[str, Path]:
    inputs = tmp_path / "in"
    return {
        "external-link": d4rl(inputs / "link.hdf5", external_link(str(canary / "secret.h5"))),
        "vds": d4rl(inputs / "vds.hdf5", virtual(str(canary / "secret.h5"))),
        "external-storage": d4rl(inputs / "raw.hdf5", external_storage(str(canary / "raw.bin"))),
        "sparse-bomb": sparse_bomb(inputs / "bomb.hdf5"),
    }


EXPECTED = {
    "external-link": "/actions is an HDF5 external link",
    "vds": "/actions is a virtual dataset (VDS)",
    "external-storage": "/actions keeps its values in external raw storage",
    "sparse-bomb": "/actions declares 6000000 values (24000000 bytes) but holds none of its 30 chunks",
}


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_each_hostile_file_is_refused_naming_file_dataset_and_fix(tmp_path, canary, kind):
    from rlarrow.io.codecs.hdf5_files import HDF5RefusedError
    from rlarrow.io.hdf5 import import_hdf5

    path = hostile_files(tmp_path, canary)[kind]
    with pytest.raises(HDF5RefusedError) as info:
        import_hdf5(path, tmp_path / "s", progress=False)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and EXPECTED[kind] in message, message
    assert "allow_hdf5_links=True" in message or "write" in message  # says what to do
    assert isinstance(info.value, InvalidInputError)
    assert not (tmp_path / "s").exists() or not rlarrow.Store.open(tmp_path / "s").runs().num_rows


@pytest.mark.parametrize("kind", ["external-link", "vds"])
def test_the_option_does_not_let_a_link_outside_the_input_directory_through(tmp_path, canary, kind):
    """Absolute paths outside, ``..`` and a symlink that leads out stay refused with allow_hdf5_links."""
    from rlarrow.io.codecs.hdf5_files import HDF5RefusedError
    from rlarrow.io.hdf5 import import_hdf5

    make = external_link if kind == "external-link" else virtual
    inputs = tmp_path / "in"
    inputs.mkdir()
    os.symlink(canary / "secret.h5", inputs / "beside.h5")  # looks beside the input, is not
    for name, target in (("abs", str(canary / "secret.h5")), ("up", "../canary/secret.h5"),
                         ("symlink", "beside.h5")):
        path = d4rl(inputs / f"{name}.hdf5", make(target))
        with pytest.raises(HDF5RefusedError, match="inside the input's directory") as info:
            import_hdf5(path, tmp_path / "s", progress=False, allow_hdf5_links=True)
        assert str(info.value).startswith(f"{path}: /actions"), info.value


def test_external_storage_stays_refused_with_the_option(tmp_path):
    from rlarrow.io.codecs.hdf5_files import HDF5RefusedError
    from rlarrow.io.hdf5 import import_hdf5

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "raw.bin").write_bytes(np.zeros(ROWS * 2, np.float32).tobytes())
    path = d4rl(tmp_path / "in" / "raw.hdf5", external_storage("raw.bin"))
    with pytest.raises(HDF5RefusedError, match="external raw storage"):
        import_hdf5(path, tmp_path / "s", progress=False, allow_hdf5_links=True)


@pytest.mark.parametrize("kind", ["external-link", "vds"])
def test_links_to_files_beside_the_input_import_with_the_option_only(tmp_path, kind):
    import h5py

    from rlarrow.io.codecs.hdf5_files import HDF5RefusedError
    from rlarrow.io.hdf5 import import_hdf5

    inputs = tmp_path / "in"
    (inputs / "parts").mkdir(parents=True)
    values = np.arange(ROWS * 2, dtype=np.float32).reshape(ROWS, 2) - 0.5
    with h5py.File(inputs / "parts" / "actions.h5", "w") as f:
        f["x"] = values
    make = external_link if kind == "external-link" else virtual
    path = d4rl(inputs / "main.hdf5", make("parts/actions.h5"))
    with pytest.raises(HDF5RefusedError, match="allow_hdf5_links=True"):
        import_hdf5(path, tmp_path / "refused", progress=False)
    report = import_hdf5(path, tmp_path / "s", progress=False, allow_hdf5_links=True)
    assert report.steps == ROWS + 1
    steps = rlarrow.Store.open(tmp_path / "s").read("steps").sort_by("step")
    got = to_numpy(steps["action"].combine_chunks(), fill_value=np.nan)
    assert got.dtype == np.float32 and np.array_equal(got[:ROWS], values)


def test_a_linked_file_is_checked_as_the_input_is(tmp_path, canary):
    """A file beside the input that itself links outside is refused, naming both files."""
    import h5py

    from rlarrow.io.codecs.hdf5_files import HDF5RefusedError
    from rlarrow.io.hdf5 import import_hdf5

    inputs = tmp_path / "in"
    inputs.mkdir()
    with h5py.File(inputs / "relay.h5", "w") as f:
        f["x"] = h5py.ExternalLink(str(canary / "secret.h5"), "/x")
    path = d4rl(inputs / "main.hdf5", external_link("relay.h5"))
    with pytest.raises(HDF5RefusedError, match="relay.h5") as info:
        import_hdf5(path, tmp_path / "s", progress=False, allow_hdf5_links=True)
    assert str(info.value).startswith(f"{path} (through {inputs / 'relay.h5'}): /x"), info.value


def test_soft_links_inside_the_file_are_fine(tmp_path):
    import h5py

    from rlarrow.io.hdf5 import import_hdf5

    def soft(f):
        f["stored/actions"] = np.full((ROWS, 2), 3.0, np.float32)
        f["actions"] = h5py.SoftLink("/stored/actions")

    report = import_hdf5(d4rl(tmp_path / "soft.hdf5", soft), tmp_path / "s", progress=False)
    assert report.steps == ROWS + 1


def test_compressed_and_small_unwritten_datasets_still_import(tmp_path):
    """What real writers make passes: gzip'd zeros (about 1000:1) and a small never-written dataset."""
    from rlarrow.io.hdf5 import import_hdf5

    n = 200_000

    def zeros(f):
        del f["observations"], f["rewards"], f["terminals"]
        f.create_dataset("observations", data=np.zeros((n, 3), np.float32), chunks=(50_000, 3),
                         compression="gzip")
        f.create_dataset("rewards", data=np.zeros(n, np.float32), compression="gzip")
        f.create_dataset("terminals", data=np.zeros(n, bool), compression="gzip")
        f.create_dataset("actions", data=np.zeros((n, 2), np.float32), compression="gzip")
        f.create_dataset("metadata/placeholder", shape=(16,), dtype="f8")  # declared, never written

    report = import_hdf5(d4rl(tmp_path / "zeros.hdf5", zeros), tmp_path / "s", progress=False)
    assert (report.episodes, report.steps) == (1, n)  # (the data stops: a partial episode, no final step)


def test_robomimic_and_minari_hdf5_are_checked_too(tmp_path, canary):
    import h5py

    from rlarrow.io.codecs.hdf5_files import HDF5RefusedError
    from rlarrow.io.hdf5 import import_hdf5
    from rlarrow.io.minari import import_minari

    robomimic = tmp_path / "robomimic.hdf5"
    with h5py.File(robomimic, "w") as f:
        f["data/demo_0/obs/x"] = np.zeros((ROWS, 2), np.float32)
        f["data/demo_0/actions"] = h5py.ExternalLink(str(canary / "secret.h5"), "/x")
    with pytest.raises(HDF5RefusedError, match="/data/demo_0/actions is an HDF5 external link"):
        import_hdf5(robomimic, tmp_path / "s", progress=False)

    minari = tmp_path / "minari"
    shutil.copytree(FIXTURES / "minari" / "cartpole" / "hdf5-v0", minari)
    main = minari / "data" / "main_data.hdf5"
    with h5py.File(main, "r+") as f:
        episode = sorted(k for k in f if k.startswith("episode_"))[0]
        del f[f"{episode}/rewards"]
        f[f"{episode}/rewards"] = h5py.ExternalLink(str(canary / "secret.h5"), "/x")
    with pytest.raises(HDF5RefusedError, match=f"/{episode}/rewards is an HDF5 external link") as info:
        import_minari(minari, tmp_path / "m", progress=False)
    assert str(info.value).startswith(f"{main}: ")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="the peak memory is read from Linux's "
                    "/proc/self/status")
def test_a_minari_main_data_symlinked_outside_the_dataset_is_refused(tmp_path, canary):
    from rlarrow.io.codecs.hdf5_files import HDF5RefusedError
    from rlarrow.io.minari import import_minari

    minari = tmp_path / "minari"
    shutil.copytree(FIXTURES / "minari" / "cartpole" / "hdf5-v0", minari)
    main = minari / "data" / "main_data.hdf5"
    main.rename(canary / "main_data.hdf5")
    os.symlink(canary / "main_data.hdf5", main)
    with pytest.raises(HDF5RefusedError, match="leads outside it") as info:
        import_minari(minari, tmp_path / "m", progress=False)
    assert str(info.value).startswith(f"{minari}: the dataset's HDF5 file 'data/main_data.hdf5'")
    assert f"a symlink to {canary / 'main_data.hdf5'}" in str(info.value)


def test_the_sparse_bomb_ends_within_a_second_and_200_mb(tmp_path):
    """Timed and measured in a fresh process: the refusal comes before anything is allocated.

    The peak is the process's own high-water mark (``VmHWM``): ``getrusage``'s ``ru_maxrss``
    keeps the forking pytest process's across ``exec`` on Linux, and would measure that.
    """
    path = sparse_bomb(tmp_path / "bomb.hdf5")
    assert path.stat().st_size < 4096
    code = f"""
import json, sys, time
from rlarrow.io.codecs.hdf5_files import HDF5RefusedError
from rlarrow.io.hdf5 import import_hdf5
start = time.perf_counter()
try:
    import_hdf5({str(path)!r}, {str(tmp_path / "s")!r}, progress=False)
    outcome = "imported"
except HDF5RefusedError as exc:
    outcome = str(exc)
seconds = time.perf_counter() - start
with open("/proc/self/status") as status:
    peak = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmHWM:"))
print(json.dumps({{"outcome": outcome, "seconds": seconds, "peak": peak}}))
"""
    done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert "holds none of its 30 chunks" in got["outcome"], got
    assert got["seconds"] < 1.0, got
    assert got["peak"] < 200 << 20, got  # the whole process, Python and pyarrow included


# --------------------------------------------------------------------------- under strace


@needs_strace
@pytest.mark.parametrize("kind", list(EXPECTED))
def test_convert_of_each_hostile_file_never_touches_the_canary(tmp_path, canary, kind):
    path = hostile_files(tmp_path, canary)[kind]
    done, touched = traced(["convert", str(path), "-o", str(tmp_path / "s")], canary=canary, cwd=tmp_path,
                           env=ENV)
    assert not touched, touched
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert str(path) in done.stderr and EXPECTED[kind] in done.stderr, done.stderr


@needs_strace
@pytest.mark.slow  # (two converts under strace: about 10 s)
def test_convert_with_the_option_reads_the_file_beside_the_input_and_nothing_outside(tmp_path, canary):
    import h5py

    inputs = tmp_path / "in"
    inputs.mkdir()
    with h5py.File(inputs / "actions.h5", "w") as f:
        f["x"] = np.ones((ROWS, 2), np.float32)
    inside = d4rl(inputs / "inside.hdf5", external_link("actions.h5"))
    outside = d4rl(inputs / "outside.hdf5", external_link(str(canary / "secret.h5")))
    done, touched = traced(["convert", str(inside), "-o", str(tmp_path / "s"), "--allow-hdf5-links"],
                           canary=canary, cwd=tmp_path, env=ENV)
    assert done.returncode == 0 and not touched, (done.stderr, touched)
    done, touched = traced(["convert", str(outside), "-o", str(tmp_path / "t"), "--allow-hdf5-links"],
                           canary=canary, cwd=tmp_path, env=ENV)
    assert not touched, touched
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert "inside the input's directory" in done.stderr, done.stderr
