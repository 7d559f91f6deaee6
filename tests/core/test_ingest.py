"""One ingest: an episode source written into a store whole or not at all, and read without a store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest

import rlarrow
from rlarrow.core import schema
from rlarrow.core.errors import CorruptFileError, StoreError
from rlarrow.core.ingest import ingest
from rlarrow.core.sources import EpisodeChunk, EpisodeRows, EpisodeSource, RunInfo


def _episodes(n: int, *, damaged_at: int | None = None, obs_dim: int = 3):
    def chunks(run_id: str) -> Iterator[EpisodeChunk]:
        for ep in range(n):
            if ep == damaged_at:
                raise CorruptFileError(Path(f"ep{ep}.bin"), "damaged")
            steps = schema.build("steps", {
                "run_id": run_id, "episode_id": ep, "step": np.arange(3), "env_index": 0,
                "observation": np.full((3, obs_dim), ep, np.float32), "action": [1, 2, None],
                "reward": [1.0, 0.5, None], "is_first": [True, False, False],
                "is_last": [False, False, True], "is_terminal": [False, False, True]})
            rows = EpisodeRows()
            rows.add(ep, num_steps=3, total=1.5, terminated=True, truncated=False, partial_end=False,
                     metadata={"ep": ep})
            yield EpisodeChunk(steps, rows.table(run_id))
    return chunks


def test_ingest_writes_every_chunk_and_one_report(tmp_path: Path) -> None:
    source = EpisodeSource(RunInfo(source="toy", name="t"), {}, _episodes(4), episodes=4)
    report = ingest(tmp_path / "s", source, run_id="r1")
    store = rlarrow.Store.open(tmp_path / "s")
    assert (report.run_id, report.episodes, report.steps) == ("r1", 4, 12)
    steps = store.read("steps").to_pandas()
    assert set(steps.run_id) == {"r1"} and steps.episode_id.tolist() == sorted(steps.episode_id.tolist())
    assert store.read("runs").column("name").to_pylist() == ["t"]
    assert store.read("episodes").column("metadata").to_pylist() != [None] * 4


def test_a_failure_in_the_last_chunk_leaves_nothing(tmp_path: Path) -> None:
    rlarrow.Store.create(tmp_path / "s").close()
    before = rlarrow.Store.open(tmp_path / "s").version
    with pytest.raises(CorruptFileError, match="ep3.bin"):
        ingest(tmp_path / "s", EpisodeSource(RunInfo(source="toy"), {}, _episodes(4, damaged_at=3)))
    store = rlarrow.Store.open(tmp_path / "s")
    assert store.version == before
    assert store.row_count("runs") == store.row_count("steps") == store.row_count("episodes") == 0


def test_a_run_id_taken_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    ingest(tmp_path / "s", EpisodeSource(RunInfo(source="toy"), {}, _episodes(1), run_id="r"))
    with pytest.raises(StoreError, match="already exists"):
        ingest(tmp_path / "s", EpisodeSource(RunInfo(source="toy"), {}, _episodes(2), run_id="r"))
    assert rlarrow.Store.open(tmp_path / "s").row_count("steps") == 3


def test_a_source_reads_into_polars_and_duckdb_without_a_store() -> None:
    source = EpisodeSource(RunInfo(source="toy"), {}, _episodes(3), run_id="r")
    frame = pl.from_arrow(source.steps())
    assert isinstance(frame, pl.DataFrame) and frame.height == 9
    reader = source.steps()  # noqa: F841 (DuckDB finds it by name)
    assert duckdb.sql("SELECT count(*), max(episode_id) FROM reader").fetchall() == [(9, 2)]
    steps, episodes = source.read()
    assert episodes.column("episode_id").to_pylist() == [0, 1, 2]
    assert steps.column("observation").type.list_size == 3


def test_another_run_id_is_carried_by_every_row() -> None:
    source = EpisodeSource(RunInfo(source="toy"), {}, _episodes(2), run_id="a").with_run_id("b")
    steps, episodes = source.read()
    assert set(steps.column("run_id").to_pylist()) == set(episodes.column("run_id").to_pylist()) == {"b"}


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_a_stored_run_reads_back_as_the_source_it_was_imported_from(tmp_path: Path) -> None:
    from rlarrow.core.run_source import read_run
    from rlarrow.io.minari import read_minari

    with read_minari(FIXTURES / "minari" / "cartpole" / "parquet-v0", run_id="m") as source:
        ingest(tmp_path / "s", source)
        steps, episodes = source.read()
    again, again_episodes = read_run(tmp_path / "s").read()
    assert again.select(steps.column_names).equals(steps)
    assert again_episodes.drop_columns(["metadata", "metadata_types"]).equals(
        episodes.drop_columns(["metadata", "metadata_types"]))
    assert read_run(tmp_path / "s").run.source == "minari"


def test_a_source_made_by_a_reader_pickles_by_reading_again(tmp_path: Path) -> None:
    import pickle

    from rlarrow.core.errors import ArgumentError
    from rlarrow.core.run_source import read_run
    from rlarrow.io.minari import read_minari

    with read_minari(FIXTURES / "minari" / "cartpole" / "arrow-v0", run_id="m") as source:
        again = pickle.loads(pickle.dumps(source))
        assert again.run_id == "m" and again.read()[0].equals(source.read()[0])
        ingest(tmp_path / "s", source)
    stored = read_run(tmp_path / "s").with_run_id("other")
    assert set(pickle.loads(pickle.dumps(stored)).read()[0].column("run_id").to_pylist()) == {"other"}
    with pytest.raises(ArgumentError, match="cannot be pickled"):
        pickle.dumps(EpisodeSource(RunInfo(source="toy"), {}, _episodes(1)))
