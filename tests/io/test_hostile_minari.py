"""Hostile Minari arrow and parquet datasets: symlinks out of the dataset are never followed (issue 36).

The datasets are written here by Minari's own writer (``minari.create_dataset_from_buffers``,
CartPole episodes) for the ``arrow`` and ``parquet`` backends; then an episode folder, a part
file, the dataset's ``metadata.json`` or an episode's ``metadata.json`` is moved into a canary
directory and replaced by a symlink to it. ``rlarrow convert`` runs under strace
(``tests/hostile.py``, all cases in one traced process) and must touch nothing in the canary,
exit non-zero and name the link, with no traceback. Symlinks that stay inside the dataset
import exactly as the plain dataset does.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from hostile import needs_strace, traced_many

import rlarrow
from rlarrow.io.minari import import_minari

HAVE_MINARI = all(importlib.util.find_spec(m) is not None for m in ("minari", "gymnasium"))
pytestmark = pytest.mark.skipif(
    not HAVE_MINARI,
    reason="the datasets are written by Minari itself (a test-only peer): "
    "pip install 'minari>=0.5' gymnasium",
)
ENV = {**os.environ, "PYTHONPATH": os.fspath(REPO)}


def written(root: Path, backend: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A CartPole dataset of 3 episodes written by Minari's writer in ``backend``; its directory."""
    import gymnasium as gym
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", os.fspath(root))
    rng = np.random.default_rng(0)
    buffers = []
    for ep in range(3):
        n = 4 + ep
        buffers.append(EpisodeBuffer(
            id=ep, seed=ep, observations=list(rng.random((n + 1, 4)).astype(np.float32)),
            actions=[int(a) for a in rng.integers(0, 2, n)], rewards=list(rng.random(n)),
            terminations=[False] * (n - 1) + [True], truncations=[False] * n, infos={}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Minari warns about the metadata a test leaves out
        minari.create_dataset_from_buffers(f"rlarrow/cart-{backend}-v0", buffers, env=gym.make("CartPole-v1"),
                                           algorithm_name="random", data_format=backend)
    return root / "rlarrow" / f"cart-{backend}-v0"


def link_out(ds: Path, name: str, canary: Path, *, relative: bool = False) -> None:
    """Move ``ds/name`` into ``canary`` and leave a symlink to it in its place."""
    here = ds / name
    there = canary / here.name
    shutil.move(here, there)
    os.symlink(os.path.relpath(there, here.parent) if relative else there, here)


#: (backend, the file or folder made a symlink out, whether the link's text is relative)
CASES = [("arrow", "data/0", False), ("parquet", "data/1/part-0.parquet", False),
         ("arrow", "data/metadata.json", False), ("parquet", "data/2/metadata.json", True),
         ("parquet", "data/0", True), ("arrow", "data/1/part-0.arrow", True)]


@needs_strace
def test_symlinks_out_of_a_minari_dataset_are_refused_untouched(tmp_path, monkeypatch):
    plain = {b: written(tmp_path / "minari", b, monkeypatch) for b in ("arrow", "parquet")}
    work = tmp_path / "work"
    work.mkdir()
    commands, canaries = [], []
    for i, (backend, name, relative) in enumerate(CASES):
        ds = work / f"ds{i}"
        shutil.copytree(plain[backend], ds)
        canary = tmp_path / f"outside{i}"
        canary.mkdir()
        link_out(ds, name, canary, relative=relative)
        commands.append(["convert", os.fspath(ds), "-o", os.fspath(work / f"store{i}")])
        canaries.append(canary)
    results = traced_many(commands, canaries=canaries, cwd=work, env=ENV)
    for (backend, name, _), (code, stderr, touched) in zip(CASES, results, strict=True):
        where = f"{backend} {name}"
        assert not touched, (where, touched[:5])
        assert code != 0, (where, stderr)
        assert "Traceback" not in stderr, (where, stderr[-3000:])
        assert f"'{name}'" in stderr and "leads outside" in stderr, (where, stderr)
    assert not any((work / f"store{i}").exists() and rlarrow.Store(work / f"store{i}").runs()
                   for i in range(len(CASES)))


def _steps(path: Path) -> dict[str, list[object]]:
    table = rlarrow.Store(path).read("steps").drop_columns(["run_id"])
    return table.sort_by([("episode_id", "ascending"), ("step", "ascending")]).to_pydict()


@pytest.mark.parametrize("backend", ["arrow", "parquet"])
def test_symlinks_inside_a_minari_dataset_import_as_the_plain_dataset(tmp_path, monkeypatch, backend):
    plain = written(tmp_path / "minari", backend, monkeypatch)
    ds = tmp_path / "linked"
    shutil.copytree(plain, ds)
    (ds / "data" / "0").rename(ds / "episode-zero")  # an episode folder elsewhere in the dataset
    os.symlink("../episode-zero", ds / "data" / "0")
    part = ds / "data" / "1" / f"part-0.{backend}"  # a part file by an absolute link inside
    part.rename(ds / "data" / "1" / f"first.{backend}")
    os.symlink(ds / "data" / "1" / f"first.{backend}", part)
    (ds / "data" / "metadata.json").rename(ds / "dataset.json")
    os.symlink("../dataset.json", ds / "data" / "metadata.json")
    report = import_minari(ds, tmp_path / "linked.rlarrow", progress=False)
    expected = import_minari(plain, tmp_path / "plain.rlarrow", progress=False)
    assert (report.episodes, report.steps) == (expected.episodes, expected.steps) == (3, 3 * 4 + 3 + 3)
    assert _steps(tmp_path / "linked.rlarrow") == _steps(tmp_path / "plain.rlarrow")
