"""A damaged Delta log never stops the store: a field-by-field fuzz of real commits.

A store writes its log (appends, then a compaction: add, remove, metaData, protocol and
commitInfo actions); one field of one commit is then given a wrong value (wrong types,
inf/nan, huge numbers, lists for objects, deep nesting, a missing key) or the commit is
truncated. Whatever it is: writes still commit, each version before the damaged commit reads
exactly as committed (later ones read as committed or raise an rlarrow error; when the
damage hides the commit's own store version, every version after the commit before it),
``repair --apply`` succeeds, and afterwards ``deltalake`` reads the table as rlarrow does.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import rlarrow
from rlarrow.core.store.delta import LOG_DIR

deltalake = pytest.importorskip("deltalake", reason="needs deltalake (the dev extra) to read the logs back")

_DEEP = "[" * 50_000 + "]" * 50_000  # (deeper than Python's JSON decoder recurses)
#: the wrong values each field gets (by name; "deep" is spliced into the text)
_WRONG: dict[str, Any] = {"text": "x", "float": 1.5, "inf": float("inf"), "nan": float("nan"),
                          "huge": 10 ** 30, "negative": -1, "list": [1], "object": {"a": 1}, "null": None,
                          "true": True, "deep": _DEEP}


def _scalars(start: int, n: int = 5) -> dict:
    return {"run_id": "r", "scope": "train", "tag": "loss", "step": np.arange(start, start + n),
            "value": np.arange(start, start + n, dtype=np.float64) / 7}


def _steps(store: rlarrow.Store) -> list[int]:
    return store.read("scalars", columns=["step"]).column("step").to_pylist()


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[Any, dict[int, list[int]]]:
    """A store with four Delta commits on ``scalars`` (the last a compaction), and what each version held."""
    path = tmp_path_factory.mktemp("fuzz") / "s"
    store = rlarrow.Store.create(path, auto_compact=None)
    committed = {store.version: []}
    for i in range(3):
        store.append("scalars", _scalars(5 * i))
        committed[store.version] = _steps(store)
    store.compact("scalars")
    committed[store.version] = _steps(store)
    return path, committed


def _leaves(value: Any, where: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path inside a commit's actions (objects and their values)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*where, key)
            yield from _leaves(item, (*where, key))


def _cases(template_path) -> list[tuple[int, int, tuple[Any, ...], str]]:
    """(commit, line, key path, mutation) for every field of every action of every commit."""
    cases = []
    log = template_path / "scalars" / LOG_DIR
    for commit in range(4):
        lines = (log / f"{commit:020d}.json").read_text().splitlines()
        for line, text in enumerate(lines):
            for where in _leaves(json.loads(text)):
                for kind in (*_WRONG, "missing"):
                    cases.append((commit, line, where, kind))
        for cut in (1, len("\n".join(lines)) // 2, len("\n".join(lines)) - 3):
            cases.append((commit, -1, (cut,), "truncate"))
    return cases


def _damage(path, commit: int, line: int, where: tuple[Any, ...], kind: str) -> None:
    file = path / "scalars" / LOG_DIR / f"{commit:020d}.json"
    text = file.read_text()
    if kind == "truncate":
        file.write_text(text[:where[0]])
        return
    lines = text.splitlines()
    action = json.loads(lines[line])
    parent = action
    for key in where[:-1]:
        parent = parent[key]
    if kind == "missing":
        del parent[where[-1]]
        lines[line] = json.dumps(action)
    elif kind == "deep":
        parent[where[-1]] = "@DEEP@"
        lines[line] = json.dumps(action).replace('"@DEEP@"', _DEEP)
    else:
        parent[where[-1]] = _WRONG[kind]
        lines[line] = json.dumps(action)  # (inf and nan as Infinity and NaN, as Python writes them)
    file.write_text("\n".join(lines) + "\n")


def _check(template, tmp_path, commit: int, line: int, where: tuple[Any, ...], kind: str) -> None:
    source, committed = template
    path = tmp_path / f"s-{commit}-{line}-{'.'.join(map(str, where))}-{kind}"[:200]
    shutil.copytree(source, path)
    versions = sorted(committed)
    damaged_version = versions[commit + 1]  # (store version 0 has no commit)
    if line == 0 or kind == "truncate":
        # the damage hides the commit's own store version (its commitInfo): every version
        # after the commit before it may be that commit's, and raises (never reads older)
        damaged_version = versions[commit] + 1 if commit else 0
    _damage(path, commit, line, where, kind)
    label = f"commit {commit}, line {line}, {where}: {kind}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rlarrow.RLArrowWarning)  # (writers warn of the damaged log)
        writer = rlarrow.Store.open(path, auto_compact=None)
        writer.append("scalars", _scalars(100))  # the damaged log stops no commit
        now = _steps(writer)
        assert sorted(now) == sorted(committed[max(committed)] + list(range(100, 105))), label
        for version, steps in committed.items():
            try:
                got = _steps(rlarrow.Store.open(path, version=version))
            except rlarrow.RLArrowError:
                assert version >= damaged_version, f"{label}: intact version {version} cannot be read"
                continue
            assert got == steps, f"{label}: version {version} reads {got}, committed {steps}"
        report = rlarrow.Store.open(path).repair(apply=True)
        assert report is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error", rlarrow.RLArrowWarning)  # repaired: no writer warns again
        fresh = rlarrow.Store.open(path, auto_compact=None)
        assert _steps(fresh) == now, label
        fresh.append("scalars", _scalars(200))
        theirs = deltalake.DeltaTable(os.fspath(path / "scalars")).to_pyarrow_table()
        assert sorted(theirs.column("step").to_pylist()) == sorted(_steps(fresh)), label


def _quick(cases: list[tuple[int, int, tuple[Any, ...], str]]) -> list[tuple[int, int, tuple[Any, ...], str]]:
    """One mutation per field (the kinds in turn), and one truncation per commit."""
    kinds = [*_WRONG, "missing"]
    seen: dict[tuple[Any, ...], int] = {}
    chosen = []
    for case in cases:
        commit, line, where, kind = case
        if kind == "truncate":
            if (commit, "truncate") not in seen:
                seen[(commit, "truncate")] = 1
                chosen.append(case)
            continue
        key = (commit, line, where)
        turn = seen.setdefault(key, len(seen))
        if kind == kinds[turn % len(kinds)]:
            chosen.append(case)
    return chosen[::5]


def test_quick_fuzz_of_every_field_of_a_real_log(template, tmp_path):
    for case in _quick(_cases(template[0])):
        _check(template, tmp_path, *case)


@pytest.mark.slow
def test_exhaustive_fuzz_of_every_field_of_a_real_log(template, tmp_path):
    for case in _cases(template[0]):
        _check(template, tmp_path, *case)


def test_a_foreign_checkpoint_is_set_aside_by_repair(template, tmp_path):
    source, committed = template
    path = tmp_path / "s"
    shutil.copytree(source, path)
    (path / "scalars" / LOG_DIR / "_last_checkpoint").write_text('{"version": "x", "size": [')
    assert _steps(rlarrow.Store.open(path, version=max(committed))) == committed[max(committed)]
    rlarrow.Store.open(path).append("scalars", _scalars(100))  # rlarrow reads no checkpoint
    report = rlarrow.Store.open(path).repair(apply=True)
    assert [p.file for p in report.problems] == [f"scalars/{LOG_DIR}/_last_checkpoint"]
    assert (path / "_damaged" / "scalars" / LOG_DIR / "_last_checkpoint").is_file()
    theirs = deltalake.DeltaTable(os.fspath(path / "scalars")).to_pyarrow_table()
    assert sorted(theirs.column("step").to_pylist()) == sorted(_steps(rlarrow.Store.open(path)))
