"""Exporters read a run's infos from the typed ``infos`` column, or from ``metadata`` where 1.0 kept them.

Steps written by rlarrow 1.0 kept an HDF5 file's per-row datasets and Minari's infos as each
step's ``metadata`` ``{"infos": ...}``; steps 1.1 keeps numbers in the typed ``infos``
column. A store of either kind exports the same robomimic datasets and Minari infos, checked
with h5py and Minari's own reader.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

HAVE = {m: importlib.util.find_spec(m) is not None for m in ("h5py", "minari")}
pytestmark = pytest.mark.skipif(not HAVE["h5py"], reason="HDF5 needs h5py: pip install 'rlarrow[hdf5]'")


def _d4rl(path):
    import h5py

    with h5py.File(path, "w") as f:  # two episodes that end (the final observations known)
        f["observations"] = np.arange(12, dtype=np.float32).reshape(6, 2)
        f["next_observations"] = np.arange(12, dtype=np.float32).reshape(6, 2) + 0.5
        f["actions"] = np.ones((6, 1), np.float32)
        f["rewards"] = np.arange(6, dtype=np.float32)
        f["terminals"] = np.array([0, 0, 1, 0, 0, 1], bool)
        qpos = np.arange(18.0).reshape(6, 3)
        qpos[0] = [np.nan, -0.0, 1e-300]
        f["infos/qpos"] = qpos
        f["infos/count"] = np.array([2**62, -1, 0, 3, 4, 5], np.int64)
        f["infos/ok"] = np.array([True, False, True, False, True, False])
        f["states"] = np.arange(12, dtype=np.float32).reshape(6, 2) * 3
    return path


def _stores(tmp_path):
    """The file imported now (typed infos) and as rlarrow 1.0 stored it (infos in the steps' metadata)."""
    import pyarrow as pa

    from rlarrow.core import metadata
    from rlarrow.core.ingest import ingest
    from rlarrow.core.sources import EpisodeChunk, EpisodeSource
    from rlarrow.io.hdf5 import import_hdf5, read_hdf5

    path = _d4rl(tmp_path / "hopper.hdf5")
    import_hdf5(path, tmp_path / "new", run_id="r", progress=False)
    with read_hdf5(path) as source:
        run, types = source.run, {k: v for k, v in source.types.items() if k != "infos"}
        steps, episodes = source.read()
    assert "infos" in steps.column_names
    # the 1.0 steps: no infos column; each row's datasets in its metadata, null on the final steps
    import h5py

    with h5py.File(path) as f:
        per_row = {k: f[k][()] for k in ("infos/qpos", "infos/count", "infos/ok", "states")}
    final = np.asarray(steps.column("is_last").to_pylist())
    rows = np.cumsum(~final) - 1
    texts, tags = metadata.encode_rows({k: v[rows] for k, v in per_row.items()})
    mask = pa.array(final)
    old = steps.drop_columns(["infos", "metadata", "metadata_types"])
    old = old.append_column("metadata", texts.cast(steps.schema.field("metadata").type))
    old = old.append_column("metadata_types", tags.cast(steps.schema.field("metadata_types").type))
    for name in ("metadata", "metadata_types"):
        column = old.column(name).combine_chunks()
        import pyarrow.compute as pc

        old = old.set_column(old.column_names.index(name), name,
                             pc.if_else(mask, pa.nulls(len(column), column.type), column))

    def chunks(run_id):
        yield EpisodeChunk(old.set_column(0, "run_id", pa.array([run_id] * old.num_rows)),
                           episodes.set_column(0, "run_id", pa.array([run_id] * episodes.num_rows)))

    ingest(tmp_path / "old", EpisodeSource(run, types, chunks, run_id="r"), progress=False)
    return path, per_row


def test_robomimic_export_reads_typed_infos_and_1_0_metadata_alike(tmp_path):
    import h5py

    import rlarrow
    from rlarrow.io.hdf5 import export_robomimic

    path, per_row = _stores(tmp_path)
    assert "infos" not in rlarrow.Store.open(tmp_path / "old").read("steps").column_names
    assert "infos" in rlarrow.Store.open(tmp_path / "new").read("steps").column_names
    for kind in ("new", "old"):
        out = export_robomimic(tmp_path / kind, tmp_path / f"{kind}.hdf5")
        with h5py.File(out) as f:
            for demo, (first, stop) in (("demo_0", (0, 3)), ("demo_1", (3, 6))):
                for key, want in per_row.items():
                    got = f[f"data/{demo}/{key}"][()]
                    assert got.dtype == want.dtype, (kind, key)
                    assert np.array_equal(got, want[first:stop], equal_nan=True), (kind, key)
            assert np.signbit(f["data/demo_0/infos/qpos"][0, 1])


@pytest.mark.skipif(not HAVE["minari"], reason="needs minari (test-only peer): pip install minari")
def test_minari_export_reads_typed_infos_and_1_0_metadata_alike(tmp_path):
    from minari.dataset.minari_dataset import MinariDataset

    from rlarrow.io.minari import export_minari

    path, per_row = _stores(tmp_path)
    got = {}
    for kind in ("new", "old"):
        out = export_minari(tmp_path / kind, tmp_path / f"{kind}-minari", data_format="hdf5")
        got[kind] = list(MinariDataset(out / "data").iterate_episodes())
    for new, old, (first, stop) in zip(got["new"], got["old"], ((0, 3), (3, 6)), strict=True):
        assert set(new.infos) == set(old.infos) == {"qpos", "count", "ok"}  # (states: not an info)
        for key in new.infos:
            want = per_row[f"infos/{key}"][first:stop]
            for infos in (new.infos, old.infos):
                assert infos[key].dtype == want.dtype and len(infos[key]) == len(want) + 1, key
                assert np.array_equal(infos[key][:-1], want, equal_nan=True), key
            # the final observation's infos: not in the file, NaN (0 and False for others)
            assert np.array_equal(new.infos[key][-1], old.infos[key][-1], equal_nan=True), key


def test_dm_env_steps_carry_typed_infos_as_1_0_metadata_did(tmp_path):
    pytest.importorskip("dm_env", reason="dm_env timesteps need dm_env: pip install dm-env")
    from rlarrow.core.dm_env_rows import DmEnvRows, dm_env_steps

    path, per_row = _stores(tmp_path)
    got = {}
    for kind in ("new", "old"):
        with DmEnvRows(tmp_path / kind) as rows:
            got[kind] = [s.custom_data for s in dm_env_steps(rows.episode_table(0))]
    assert len(got["new"]) == len(got["old"]) == 4 and got["new"][3] is None is got["old"][3]
    for new, old, i in zip(got["new"][:3], got["old"][:3], range(3), strict=True):
        for key in ("qpos", "count", "ok"):
            want = per_row[f"infos/{key}"][i]
            for value in (new["infos"][key], old["infos"][key]):
                assert np.asarray(value).dtype == want.dtype and np.array_equal(value, want, equal_nan=True)
