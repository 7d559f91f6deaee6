"""Warnings an import says once per call, with a count, not once per file."""

from __future__ import annotations

import warnings

import numpy as np

from rlarrow.core.errors import AssumptionWarning
from rlarrow.io.memory.csv import write_csv
from rlarrow.io.postprocessing import ArrowMemoryFileIterator


def test_arrow_iterator_says_the_csv_assumption_once_for_all_files(tmp_path):
    for i in range(5):
        write_csv({"states": np.full((3, 1, 2), i, np.float32)}, tmp_path / f"m{i}.csv")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = list(ArrowMemoryFileIterator(str(tmp_path / "*.csv")))
    said = [str(w.message) for w in caught if issubclass(w.category, AssumptionWarning)]
    assert len(said) == 1, said
    assert said[0].startswith("assumed num_envs=1 for 5 csv file(s) (m0.csv, m1.csv, m2.csv, ...)")
    assert [name for name, _ in batches] == [f"m{i}.csv" for i in range(5)]
    assert all(b.column("num_envs").to_pylist() == [1, 1, 1] for _, b in batches)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # told num_envs: nothing assumed, nothing said
        assert len(list(ArrowMemoryFileIterator(str(tmp_path / "*.csv"), num_envs=3))) == 5
