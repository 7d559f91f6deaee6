"""Tables and their layouts: what a store lists, how it reads, where new rows go.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

:class:`TableStore` answers from the view of the last refresh: :meth:`~TableStore.files`,
:meth:`~TableStore.row_count`, :meth:`~TableStore.schema`, :meth:`~TableStore.read` and
:meth:`~TableStore.dataset`, over one layout of a table or all of them together
(:meth:`~TableStore.layouts`). Code that reads a store's files itself (DuckDB views, Polars
scans, Ray and PyTorch datasets) uses the same view through the public layout methods:
:meth:`~TableStore.layout_dirs` (which directories ``table``/``layout`` select),
:meth:`~TableStore.left_out_columns` and :meth:`~TableStore.check_columns` (columns whose
types differ between layouts read together). It also chooses the layout rows go to
(:meth:`~TableStore._place`), a new one when no layout has their tensor types.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from rlarrow.core import arguments as _arguments
from rlarrow.core import schema as _schema
from rlarrow.core.errors import (
    ArgumentTypeError,
    CorruptFileError,
    NotFoundError,
    SchemaMismatchError,
    StoreError,
)
from rlarrow.core.store.journal import READ_ATTEMPTS, JournalStore
from rlarrow.core.store.layouts import (
    LayoutInfo,
    data_run_ids,
    file_run_ids,
    has_layouts,
    layout_directory,
    layout_number,
    left_out_note,
    single_layout,
    table_of,
    union_layouts,
    validate_rows,
)
from rlarrow.core.store.manifest import (
    check_inside,
    decode_schema,
    encode_schema,
    fsync_dir,
    retired_location,
    write_error,
)
from rlarrow.core.tensors import empty_table
from rlarrow.core.type_names import schema_differences

__all__: list[str] = []


#: Files whose footer schema was checked (path, inode, size, mtime): files never change.
_FOOTERS_OK: set[tuple[str, int, int, int]] = set()

class TableStore(JournalStore):
    """Listing, reading and placing rows in a store's tables and layouts (see :class:`rlarrow.Store`)."""

    def schema(self, table: str, *, layout: int | None = None) -> pa.Schema | None:
        """The store's concrete Arrow schema of ``table`` (None until it is known).

        A table whose runs hold different tensors has several layouts (:meth:`layouts`):
        ``layout=N`` gives the schema of one; None, the schema :meth:`read` gives for all of
        them together (union by name; a column whose type differs between layouts is left
        out). With one layout both are that layout's schema.
        """
        _schema.table(table_of(table))
        names = self.layout_dirs(table, layout)
        if len(names) > 1:
            return self._combined_schema(names)[0]
        table = names[0]
        text = self._manifest["tables"].get(table, {}).get("schema")
        return None if text is None else decode_schema(text)

    def _layout_names(self, table: str) -> list[str]:
        """The directories of ``table``'s layouts in the current view, first layout first."""
        return sorted((n for n in self._manifest["tables"] if table_of(n) == table), key=layout_number)

    def layout_dirs(self, table: str, layout: int | None = None) -> list[str]:
        """The layout directories ``table`` and ``layout`` select, in the current view.

        For code that reads the files itself: :meth:`files` gives their paths, and a file's
        layout is its directory's name (``steps``, ``steps.2``, ...). The view is that of
        the last :meth:`refresh` (or of :meth:`files`, or of a lease's ``pin_view``): no
        manifest is read here, so the directories match the files taken from that view.

        Args:
            table: a table (``steps``); a layout directory's own name (``steps.2``) selects
                that directory alone.
            layout: one layout's number (:meth:`layouts`); None: every layout of the table,
                the first layout first (a table with no layout yet: its own directory).

        Raises:
            StoreError: the table has no such layout.
            ArgumentTypeError: ``layout`` is not a number (also a TypeError).

        Example:
            >>> import numpy as np, rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> base = {"snapshot_id": 0, "memory_index": [0], "env_index": 0, "memory_size": 1,
            ...         "num_envs": 1}
            >>> _ = store.append("memory", {**base, "run_id": "ppo", "log_prob": np.zeros((1, 1), "f4")})
            >>> _ = store.append("memory", {**base, "run_id": "dqn", "next_states": np.zeros((1, 4), "f4")})
            >>> store.layout_dirs("memory"), store.layout_dirs("memory", 2), store.layout_dirs("steps")
            (['memory', 'memory.2'], ['memory.2'], ['steps'])
        """
        if table != table_of(table):  # a layout directory named directly (internal use)
            if table not in self._manifest["tables"]:
                raise StoreError(f"{self.path}: no layout directory {table!r}")
            return [table]
        if layout is None:
            return self._layout_names(table) or [table]
        if isinstance(layout, bool) or not isinstance(layout, int):
            raise ArgumentTypeError(f"layout={layout!r}: a layout is a number (1, 2, ...: "
                                    "Store.layouts(table)); a tensor's binary/list storage is chosen when "
                                    "writing, not reading")
        name = layout_directory(table, layout)
        if name not in self._manifest["tables"]:
            have = ", ".join(str(layout_number(n)) for n in self._layout_names(table))
            raise StoreError(f"{self.path}: table {table!r} has no layout {layout} (it has {have}; "
                             f"Store.layouts({table!r}) lists them)")
        return [name]

    def _combined_schema(self, names: list[str]) -> tuple[pa.Schema | None, dict[str, list[str]]]:
        """The schema of layouts read together, and the columns left out (with each layout's type).

        Union by name, in order of first appearance: a column some layouts lack is nullable
        (their rows read null); a column whose type differs between layouts is left out.
        """
        return union_layouts([(n, self.schema(table_of(n), layout=layout_number(n))) for n in names])

    def left_out_columns(self, table: str, layout: int | None = None) -> dict[str, list[str]]:
        """Columns left out when ``table``'s layouts are read together, with each layout's type.

        A column whose type differs between layouts cannot be read together: :meth:`read`
        (with ``layout=None``) leaves it out. Each is given with one line per layout, e.g.
        ``"layout 2 (memory.2/) has float32 (4,) list"``. Empty when one layout is
        selected. From the current view (see :meth:`layout_dirs`).

        Example:
            >>> import numpy as np, rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> base = {"snapshot_id": 0, "memory_index": [0], "env_index": 0, "memory_size": 1,
            ...         "num_envs": 1}
            >>> _ = store.append("memory", {**base, "run_id": "a", "states": np.zeros((1, 2), "f4")})
            >>> _ = store.append("memory", {**base, "run_id": "b", "states": np.zeros((1, 3), "f4")})
            >>> list(store.left_out_columns("memory")), store.left_out_columns("memory", layout=1)
            (['states'], {})
        """
        return self._combined_schema(self.layout_dirs(table, layout))[1]

    def check_columns(self, table: str, columns: Sequence[str] | None = None, *,
                      layout: int | None = None) -> None:
        """What :meth:`read` checks before it reads ``table``'s layouts together.

        ``columns`` naming a column left out (:meth:`left_out_columns`) is an error; reading
        all columns (``columns=None``) with columns left out warns once per store object
        and table, naming them. Nothing happens when one layout is selected. Code that
        reads the files itself calls this first, to behave as :meth:`read` does.

        Raises:
            SchemaMismatchError: ``columns`` asks for a column whose type differs between
                the layouts read together.

        Example:
            >>> import rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> store.check_columns("steps", ["observation"])  # one layout: nothing to check
        """
        names = self.layout_dirs(table, layout)
        if len(names) < 2:
            return
        clash = self._combined_schema(names)[1]
        if not clash:
            return
        asked = [c for c in columns or [] if c in clash]
        if asked:
            raise SchemaMismatchError(table, [
                f"column(s) {asked} of {table!r} have different types in its layouts, which cannot be "
                "read together: read one layout (layout=N; Store.layouts lists them)"] + [
                f"{c}: {'; '.join(clash[c])}" for c in asked])
        key = (table, tuple(sorted(clash)))
        warned = self.__dict__.setdefault("_warned_layouts", set())
        if columns is None and key not in warned:
            import warnings

            from rlarrow.core.errors import RLArrowWarning

            warned.add(key)
            warnings.warn(left_out_note(self.path, table, clash), RLArrowWarning, stacklevel=3)

    def layouts(self, table: str) -> list[LayoutInfo]:
        """The layouts of ``table``: their numbers, directories, schemas, rows and runs.

        A table with tensor columns holds runs whose tensors differ (a PPO and a DQN
        memory, CartPole and pixel episodes): each set of tensor types is a layout, a
        concrete schema in its own directory (``TABLE/`` for the first, ``TABLE.2/``,
        ``TABLE.3/``... for the others). A run's rows of a table are all in one layout.

        Example:
            >>> import numpy as np, rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> base = {"snapshot_id": 0, "memory_index": [0], "env_index": 0, "memory_size": 1,
            ...         "num_envs": 1}
            >>> _ = store.append("memory", {**base, "run_id": "ppo", "log_prob": np.zeros((1, 1), "f4")})
            >>> _ = store.append("memory", {**base, "run_id": "dqn", "next_states": np.zeros((1, 4), "f4")})
            >>> [(l.layout, l.directory, l.run_ids) for l in store.layouts("memory")]
            [(1, 'memory', ['ppo']), (2, 'memory.2', ['dqn'])]
        """
        _schema.table(table)
        self.refresh()
        out = []
        for name in self._layout_names(table):
            n = layout_number(name)
            entry = self._manifest["tables"][name]
            out.append(LayoutInfo(table=table, layout=n, directory=name,
                                  schema=self.schema(table, layout=n), rows=self.row_count(table, layout=n),
                                  files=len(self.files(table, layout=n, refresh=False)),
                                  run_ids=sorted(self._runs_in(name)) if entry["files"] or self._tx else []))
        return out

    def layout_of(self, table: str, run_id: str) -> int | None:
        """The layout holding ``run_id``'s rows of ``table`` (None: the run has none there)."""
        _schema.table(table)
        self.refresh()
        names = self._layout_names(table)
        if len(names) == 1:
            return 1 if run_id in self._runs_in(names[0]) else None
        for name in names:
            if run_id in self._runs_in(name):
                return layout_number(name)
        return None

    def _runs_in(self, name: str) -> frozenset[str]:
        """The run ids of one layout directory's files (each file read once per store object)."""
        cache: dict[str, frozenset[str]] = self.__dict__.setdefault("_run_ids", {})
        ids: set[str] = set()
        for path in self.files(table_of(name), layout=layout_number(name), refresh=False):
            key = os.fspath(path)
            got = cache.get(key)
            if got is None:
                try:
                    got = cache[key] = file_run_ids(path)
                except (OSError, pa.ArrowException) as exc:
                    raise self._find_damage(table_of(name), exc) from exc
            ids |= got
        return frozenset(ids)

    def _matching_layout(self, manifest: dict[str, Any], table: str, schema: pa.Schema) -> str | None:
        """The layout directory of ``table`` in ``manifest`` whose schema is ``schema``."""
        plain = schema.remove_metadata()
        names: list[str] = sorted((n for n in manifest["tables"] if table_of(n) == table), key=layout_number)
        for name in names:
            text = manifest["tables"][name].get("schema")
            if text is not None and decode_schema(text).equals(plain):
                return name
        return None

    def _new_layout_entry(self, manifest: dict[str, Any], table: str, schema: pa.Schema) -> str:
        """Add a new, empty layout of ``table`` with ``schema`` to ``manifest`` (under the lock).

        Its directory is made here: the first ``TABLE.N`` (N from 2) that the manifest does
        not list and that holds no data file (a directory left by hand is not taken over).
        """
        n = 2
        while True:
            name = layout_directory(table, n)
            directory = self.path / name
            if name not in manifest["tables"] and not (
                    directory.is_symlink() or (directory.exists() and not directory.is_dir())
                    or (directory.is_dir() and any(directory.glob("*.parquet")))):
                break
            n += 1
        try:
            directory.mkdir(exist_ok=True)
            fsync_dir(self.path)
        except OSError as exc:
            raise write_error(directory, exc) from exc
        manifest["tables"][name] = {
            "schema_version": manifest["tables"][table]["schema_version"],
            "schema": encode_schema(schema.remove_metadata()), "rows": 0, "files": []}
        return name

    def _add_layout(self, table: str, schema: pa.Schema) -> str:
        """The layout directory for data of ``schema``: an existing one, or a new one fixed now."""
        with self._locked():
            manifest = self._recover(self._read_manifest(), sweep=False)
            name = self._matching_layout(manifest, table, schema)
            if name is None:
                if manifest["tables"][table].get("schema") is None and (
                        self._tx is None or table not in self._tx.schemas):
                    name = table  # the first layout: fixed by the first commit, as always
                else:
                    name = self._new_layout_entry(manifest, table, schema)
                    self._write_manifest(manifest)
            self._manifest = manifest
        return name

    def _place(self, table: str, data: pa.Table | pa.RecordBatch | Mapping[str, Any]) -> tuple[pa.Table, str]:
        """``data`` validated in the exact form of the layout it goes to, and that layout's directory.

        The layout holding the data's runs, if one does; else the first layout whose types
        the data has (tensors converted between the binary and list storage, missing
        tensor columns as nulls); else a new layout.

        Raises:
            SchemaMismatchError: the data does not fit the table, or a run it holds has rows
                in a layout whose types the data does not have (one line per column).
        """
        names = [n for n in self._layout_names(table)
                 if self.schema(table, layout=layout_number(n)) is not None]
        if not names:
            return validate_rows(table, data, None), table  # the first commit fixes the first layout
        if not has_layouts(table):
            return validate_rows(table, data, self.schema(table)), table
        runs = data_run_ids(data)
        homes: dict[str, str] = {}
        if len(names) == 1:  # (the usual case: no run is looked up unless the data does not fit)
            candidates = names
        else:
            homes = {run: name for name in names for run in runs & self._runs_in(name)}
            if len(set(homes.values())) > 1:
                raise SchemaMismatchError(table, [
                    f"the data holds runs whose rows of {table!r} are in different layouts ("
                    + ", ".join(f"{r!r} in {n}/" for r, n in sorted(homes.items())) + "): write each run "
                    "apart"])
            candidates = sorted(set(homes.values())) if homes else names
        error: SchemaMismatchError | None = None
        for name in candidates:
            layout_schema = self.schema(table, layout=layout_number(name))
            try:
                got = validate_rows(table, data, layout_schema)
            except SchemaMismatchError as exc:
                error = error or exc
                continue
            if layout_schema is not None and got.schema.remove_metadata().equals(layout_schema):
                return got, name
        if len(names) == 1:
            homes = {run: names[0] for run in runs & self._runs_in(names[0])}
        if homes:  # the data's run is in a layout whose types the data does not have
            home = next(iter(homes.values()))
            home_schema = self.schema(table, layout=layout_number(home))
            problems = [f"run(s) {sorted(homes)} already have rows of {table!r} in layout "
                        f"{layout_number(home)} ({home}/), whose types this data does not have: a run "
                        "keeps one layout per table (convert the data, or write it under a new run id, "
                        "which starts another layout)"]
            got_schema: object = None
            try:
                natural = validate_rows(table, data, None)
                got_schema = natural.schema.remove_metadata()
                _schema.conform(table, natural, home_schema)  # says what differs
            except SchemaMismatchError as exc:
                problems += exc.problems
                got_schema = exc.got if got_schema is None else got_schema
            raise SchemaMismatchError(table, problems, expected=home_schema, got=got_schema,
                                      differences=schema_differences(home_schema, got_schema))
        natural = validate_rows(table, data, None)
        return natural, self._add_layout(table, natural.schema)

    def _check_runs(self, table: str, name: str, runs: set[str]) -> None:
        """Refuse rows for layout ``name`` of runs whose rows of ``table`` are in another layout."""
        others = [n for n in self._layout_names(table) if n != name]
        for other in others:
            clash = sorted(runs & self._runs_in(other))
            if clash:
                raise SchemaMismatchError(table, [
                    f"run(s) {clash} already have rows of {table!r} in layout {layout_number(other)} "
                    f"({other}/), and these rows are of layout {layout_number(name)} ({name}/): a run "
                    "keeps one layout per table (write this data under a new run id)"],
                    expected=self.schema(table, layout=layout_number(other)),
                    got=self.schema(table, layout=layout_number(name)))

    @property
    def filesystem(self) -> None:
        """The pyarrow filesystem :meth:`files` are on: None, the local disk.

        (As :class:`~rlarrow.core.store.StoreReader` says; a ``RemoteStore``'s is its bucket's.)
        """
        return None

    def tables(self) -> list[str]:
        """Names of the store's tables (a table's further layouts, ``TABLE.N``, are the table's)."""
        return [n for n in self._manifest["tables"] if n == table_of(n)]

    def files(self, table: str, *, refresh: bool = True, layout: int | None = None) -> list[Path]:
        """Paths of the committed Parquet files of ``table``, oldest first.

        ``refresh=False`` answers from the view of the last :meth:`refresh` (so that
        several tables' files come from one manifest). ``layout``: only that layout's
        files (:meth:`layouts`); None: every layout's, the first layout's first.

        Raises:
            CorruptFileError: a listed file is a symbolic link (it could lead outside the
                store) or not a regular file.
        """
        _schema.table(table_of(table))
        if refresh:
            self.refresh()
        names = self.layout_dirs(table, layout)
        if len(names) > 1 or names[0] != table:
            return [f for n in names for f in self.files(n, refresh=False, layout=single_layout(n))]
        directory = self.path / table
        # files an open transaction of this store object wrote: read back by it alone
        uncommitted = [f.tmp for f in self._tx.files if f.table == table] if self._tx else []
        listed = self._manifest["tables"][table]["files"]
        # (an earlier version, opened with version=, lists files replaced since: kept aside)
        return [check_inside(retired_location(self.path, f"{table}/{f['name']}").parent if f.get("retired")
                             else directory, f["name"]) for f in listed] + uncommitted

    def row_count(self, table: str, *, layout: int | None = None) -> int:
        """Committed rows of ``table`` (of one of its layouts with ``layout``)."""
        _schema.table(table_of(table))
        self.refresh()
        names = self.layout_dirs(table, layout)
        if len(names) > 1 or names[0] != table:
            return sum(self.row_count(n, layout=single_layout(n)) for n in names)
        uncommitted = sum(f.rows for f in self._tx.files if f.table == table) if self._tx else 0
        return int(self._manifest["tables"][table]["rows"]) + uncommitted

    def dataset(self, table: str, *, layout: int | None = None,
                files: Sequence[str | os.PathLike[str]] | None = None) -> Any:
        """A ``pyarrow.dataset.Dataset`` over the committed files of ``table``.

        It is a snapshot: a compaction by another writer may replace its files, so
        long-lived readers should call this again (:meth:`read` retries by itself).
        ``layout``: one layout of the table (:meth:`layouts`); None: all of them, in the
        schema :meth:`schema` gives (a column whose type differs between layouts is left
        out; rows of a layout without a column read null there).
        ``files``: only these of its files (paths :meth:`files` gave, e.g. the ones a
        :class:`ReaderLease` pinned), read in the table's schema.
        """
        import pyarrow.dataset as ds

        files = self.files(table, layout=layout) if files is None else files
        schema = self.schema(table, layout=layout)
        if files:
            self._check_footers(table, files, layout)
        if not files:
            empty_schema = schema if schema is not None else _schema.table(table_of(table)).arrow_schema()
            return ds.dataset(empty_table(empty_schema))  # (binary tensors in a struct included)
        # pages' CRC-32s checked where the writer stored them (~8% of a read)
        fmt = ds.ParquetFileFormat(default_fragment_scan_options=ds.ParquetFragmentScanOptions(
            page_checksum_verification=True))
        return ds.dataset([os.fspath(f) for f in files], format=fmt, schema=schema)

    def read(
        self,
        table: str,
        columns: Sequence[str] | None = None,
        filter: Any = None,  # noqa: A002 - pyarrow's name
        *,
        layout: int | None = None,
    ) -> pa.Table:
        """Read ``table`` (optionally some columns and a pyarrow filter expression).

        A table whose runs hold different tensors has several layouts (:meth:`layouts`).
        ``layout=N`` reads one; None reads all of them together, the first layout's rows
        first: columns are matched by name (a layout without a column reads null there),
        and a column whose type differs between layouts is left out, with an
        :class:`~rlarrow.core.errors.RLArrowWarning` said once per store object (a run's rows
        are in one layout: read it with ``layout=store.layout_of(table, run_id)`` to have
        all its columns).

        Example:
            >>> import numpy as np, rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> base = {"snapshot_id": 0, "memory_index": [0], "env_index": 0, "memory_size": 1,
            ...         "num_envs": 1}
            >>> _ = store.append("memory", {**base, "run_id": "ppo", "values": np.ones((1, 1), "f4")})
            >>> _ = store.append("memory", {**base, "run_id": "dqn", "next_states": np.ones((1, 2), "f4")})
            >>> store.read("memory", columns=["run_id", "values"]).to_pylist()
            [{'run_id': 'ppo', 'values': [1.0]}, {'run_id': 'dqn', 'values': None}]

        A bare string for ``columns`` is one column (``columns="reward"``).

        Raises:
            NotFoundError: ``columns`` names a column the table does not have.
            CorruptFileError: a file of the table is damaged (the error names it).
            SchemaMismatchError: ``columns`` names a column whose type differs between the
                layouts read together.
        """
        columns = _arguments.names(columns, "columns", what="column name")
        for attempt in range(READ_ATTEMPTS):
            files = self.files(table, layout=layout)
            self.check_columns(table, columns, layout=layout)
            try:
                dataset = self.dataset(table, layout=layout, files=files)
                unknown = [c for c in columns or [] if c not in dataset.schema.names]
                if unknown:
                    raise NotFoundError(f"columns: no column {', '.join(map(repr, unknown))} in table "
                                        f"{table!r}; its columns are {', '.join(dataset.schema.names)}")
                result = dataset.to_table(columns=list(columns) if columns is not None else None,
                                          filter=filter)
                break
            except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
                # A concurrent compaction replaced files of this snapshot: read the new ones.
                if attempt + 1 < READ_ATTEMPTS and not all(f.exists() for f in files):
                    continue
                raise self._find_damage(table, exc) from exc
        return result.replace_schema_metadata(_schema.table(table).file_metadata())


    def verify(self, table: str, files: Sequence[str | os.PathLike[str]] | None = None, *,
               layout: int | None = None) -> None:
        """Check ``files`` of ``table`` (default: its committed files) whole, for another engine to read.

        Every page is read against its CRC-32 and every footer against the table's columns
        (:func:`~rlarrow.core.store.checked.verify_pages`; what :meth:`read` checks as it
        reads). DuckDB and Polars check neither: ``rlarrow.sql``, ``connect`` and ``scan``
        call this first. A file found whole is not read again by this process while it is
        unchanged (same inode, size and modification time). A missing file is left to the
        read that needs it.

        Example:
            >>> import numpy as np, rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> _ = store.append("scalars", {"run_id": "r", "scope": "train", "tag": "x",
            ...                              "step": np.arange(3), "value": np.zeros(3)})
            >>> store.verify("scalars")

        Raises:
            CorruptFileError: naming the first damaged file, and how to set it aside.
        """
        from rlarrow.core.store.checked import verify_pages

        files = self.files(table, layout=layout) if files is None else files
        self._check_footers(table, files, layout)
        for f in files:
            verify_pages(f)

    def damage(self, table: str, exc: BaseException, *, layout: int | None = None,
               files: Sequence[str | os.PathLike[str]] | None = None) -> CorruptFileError:
        """The error for a failed pyarrow read of ``table``'s ``files``: it names the damaged file.

        For a reader of :meth:`dataset` whose read raised ``exc`` (a page failing its CRC,
        say): the files are checked whole (:meth:`verify`) to find the one at fault; if
        none is, the error names the table's directory.

        Example:
            >>> try:  # doctest: +SKIP
            ...     table = store.dataset("steps").to_table()
            ... except (pyarrow.ArrowException, OSError) as exc:
            ...     raise store.damage("steps", exc) from exc
        """
        try:
            self.verify(table, files, layout=layout)
        except CorruptFileError as found:
            return found
        return CorruptFileError(self.path / table, f"cannot be read ({exc}); `rlarrow info {self.path}` "
                                "names every damaged file")

    def check_footers(self, table: str, files: Sequence[str | os.PathLike[str]], *,
                      layout: int | None = None) -> None:
        """Every file's footer holds its layout's columns and types (a footer has no checksum).

        Cheap (a footer read, once per process for an unchanged file): what a loader that
        checks pages as it reads (:func:`~rlarrow.core.store.checked.open_checked`) checks
        before it starts.

        Raises:
            CorruptFileError: naming a file whose footer cannot be read or is not its table's.
        """
        self._check_footers(table, files, layout)

    def _check_footers(self, table: str, files: Sequence[str | os.PathLike[str]], layout: int | None) -> None:
        """Every file's footer schema is its layout's: no column renamed or lost by damage.

        Parquet checksums pages, not the footer: a damaged footer that still decodes could
        rename a column, which a dataset read in the table's schema would fill with nulls.
        Checked once per file and process (files never change).
        """
        import pyarrow.parquet as pq

        from rlarrow.core.store.checked import shown_path

        for f in files:
            path = os.fspath(f)
            try:
                st = os.lstat(path)  # (files() refused links)
            except OSError:
                continue  # missing: the read names it
            key = (path, st.st_ino, st.st_size, st.st_mtime_ns)
            if key in _FOOTERS_OK:
                continue
            directory = os.path.basename(os.path.dirname(path))
            name = directory if table_of(directory) == table else None
            want = self.schema(table, layout=layout_number(name)) if name is not None else None
            shown = shown_path(path)
            try:
                got = pq.read_schema(path)
            except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
                raise CorruptFileError(shown, f"its footer cannot be read ({exc}); run `rlarrow repair "
                                       f"{self.path}` to see what can be kept") from exc
            if want is not None and got.names != want.names:
                raise CorruptFileError(shown, f"its footer lists the columns {got.names}, not those of "
                                       f"{table!r} ({want.names}): the file is damaged; run `rlarrow repair "
                                       f"{self.path}` to see what can be kept")
            if want is not None and got.types != want.types:  # (nullability aside: a rewrite may differ)
                raise CorruptFileError(shown, f"its footer gives columns of other types than {table!r}'s: "
                                       f"the file is damaged; run `rlarrow repair {self.path}` to see what "
                                       "can be kept")
            if len(_FOOTERS_OK) > 100_000:
                _FOOTERS_OK.clear()
            _FOOTERS_OK.add(key)

    def _find_damage(self, table: str, exc: Exception) -> Exception:
        """The error a failed read of ``table`` raises (the repair layer names the damaged file)."""
        return CorruptFileError(self.path / table, f"cannot read table {table!r}: {exc}")
