"""Format migrations: upgrading a store written by an older major schema version.

Every table's schema has a ``MAJOR.MINOR`` version (``schemas/<table>.v<MAJOR>.json``).
A minor version only adds nullable columns, so older readers still read the data (they
warn). A major version changes what existing columns mean or how they are stored;
opening a store of an older major version raises :class:`~rlarrow.FormatVersionError`
naming ``rlarrow migrate STORE``, which runs the migration functions registered here,
one major version at a time, file by file, each rewrite journaled like a compaction
(a process killed mid-migration leaves the store as it was or migrated, never mixed
within a file).

Version 1 is the first released data model, so no migration ships yet; one for
version N -> N+1 is registered with::

    @register_migration("steps", from_major=1)
    def steps_v1_to_v2(table: pa.Table) -> pa.Table:
        ...  # return the table in the v2 layout

Example:
    >>> from rlarrow.core import migrations
    >>> migrations.registered()
    []
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.errors import FormatVersionError, StoreError
from rlarrow.core.progress import iterate as _iterate
from rlarrow.core.store import Maintenance, Store, encode_schema
from rlarrow.core.store.manifest import SEGMENTED_FORMAT, failure_cause

__all__ = ["Migration", "migrate", "register_migration", "registered", "unregister_migration"]

#: a migration: a table of the old version in, the same rows under the new schema out
Migration = Callable[[pa.Table], pa.Table]
_REGISTRY: dict[tuple[str, int], Migration] = {}


def register_migration(table: str, *, from_major: int) -> Callable[[Migration], Migration]:
    """Register ``fn(table) -> table`` upgrading ``table`` from ``from_major`` to the next major."""

    def decorator(fn: Migration) -> Migration:
        _REGISTRY[(table, from_major)] = fn
        return fn

    return decorator


def unregister_migration(table: str, *, from_major: int) -> None:
    """Remove a registered migration (tests and plug-ins)."""
    _REGISTRY.pop((table, from_major), None)


def registered() -> list[tuple[str, int]]:
    """``(table, from_major)`` of every registered migration."""
    return sorted(_REGISTRY)


def _plan(table: str, got_major: int, want_major: int) -> list[Migration]:
    steps = []
    for major in range(got_major, want_major):
        fn = _REGISTRY.get((table, major))
        if fn is None:
            raise FormatVersionError(
                f"no migration is registered for table {table!r} from schema v{major} to "
                f"v{major + 1}; this store cannot be upgraded by this rlarrow "
                f"(registered: {registered() or 'none'})"
            )
        steps.append(fn)
    return steps


def migrate(path: str | os.PathLike[str], *, dry_run: bool = False, progress: bool = False) -> list[str]:
    """Upgrade the store at ``path`` in place to the current format; returns what was done.

    Tables already current are left alone, so running it twice is harmless.

    Raises:
        FormatVersionError: a table needs a migration that is not registered, or the
            store is newer than this rlarrow.
    """
    store = Store(path, check_versions=False)
    actions: list[str] = []
    with store.maintenance() as m:
        manifest: dict[str, Any] = m.manifest
        fmt = _schema.parse_version(manifest.get("format_version", "0.0"))
        if fmt[0] > SEGMENTED_FORMAT[0]:  # (2.0: format 1 with manifest segments, read here)
            raise FormatVersionError(f"{path}: store format {fmt[0]} is newer than this rlarrow; "
                                     "upgrade with: pip install -U rlarrow")
        plans: dict[str, list[Migration]] = {}
        for name, entry in manifest["tables"].items():
            got = _schema.parse_version(entry.get("schema_version", "0.0"))
            table = name.partition(".")[0]  # a further layout TABLE.N migrates as its table
            if table not in _schema.TABLE_NAMES:
                continue  # a table of a newer minor format: not this rlarrow's to migrate
            want = _schema.table(table).version
            if got[0] > want[0]:
                raise FormatVersionError(f"{path}: table {name!r} is schema v{got[0]}, newer than "
                                         "this rlarrow; upgrade with: pip install -U rlarrow")
            if got[0] < want[0]:
                plans[name] = _plan(table, got[0], want[0])
                actions.append(f"{name}: schema v{got[0]} -> v{want[0]} "
                               f"({len(entry['files'])} file(s), {entry['rows']} rows)")
        if fmt < _schema.FORMAT_VERSION:
            actions.append(f"store format {_schema.format_version(fmt)} -> "
                           f"{_schema.format_version(_schema.FORMAT_VERSION)}")
        if dry_run or not actions:
            return actions or ["nothing to do: the store is current"]
        done: list[str] = []  # the tables (files) migrated and committed so far
        try:
            _migrate_tables(store, m, plans, progress, done)
        except (StoreError, OSError) as exc:
            if not done:
                raise
            cause = failure_cause(exc)
            raise StoreError(f"{path}: the migration stopped part way ({cause}). Committed before it "
                             f"stopped (kept, readable): {', '.join(done)}. Run `rlarrow migrate {path}` "
                             "again once the cause is fixed: it goes on from there") from exc
        for name in _schema.TABLE_NAMES:  # tables added since the store was written
            if name not in manifest["tables"]:
                (Path(path) / name).mkdir(exist_ok=True)
                manifest["tables"][name] = {
                    "schema_version": _schema.format_version(_schema.table(name).version),
                    "schema": None, "rows": 0, "files": [],
                }
        manifest["format_version"] = _schema.format_version(_schema.FORMAT_VERSION)
        m.write()
    return actions


def _migrate_tables(store: Store, m: Maintenance, plans: dict[str, list[Migration]], progress: bool,
                    done: list[str]) -> None:
    """Rewrite each planned table's files (one journaled commit each); ``done`` says what was committed."""
    manifest = m.manifest
    for name, fns in plans.items():
        spec = _schema.table(name.partition(".")[0])

        def transform(data: pa.Table, fns: list[Migration] = fns, table: str = spec.name) -> pa.Table:
            for fn in fns:
                data = fn(data)
            return _schema.conform(table, data)

        version = _schema.format_version(spec.version)
        entry = manifest["tables"][name]
        names = [f["name"] for f in entry["files"]]
        rewritten = 0
        for file_name in _iterate(names, f"migrate {name}", "file", None if progress else False):
            # A file's own footer says whether an interrupted run already migrated it.
            info = _schema.read_file_info(store.path / name / file_name)
            if info.schema_version[0] < spec.version[0]:
                m.rewrite(name, [file_name], transform=transform)
                rewritten += 1
                if rewritten == 1:
                    done.append(name)
                done[-1] = f"{name} ({rewritten} of {len(names)} files)"
        entry = manifest["tables"][name]
        entry["schema_version"] = version
        entry["schema"] = None
        if entry["files"]:
            first = _schema.read_file_info(store.path / name / entry["files"][0]["name"])
            entry["schema"] = encode_schema(first.schema.remove_metadata())
        m.write()
        if not rewritten:
            done.append(f"{name} (its files migrated before)")
