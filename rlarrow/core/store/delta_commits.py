"""Reading one Delta commit of a table's log, checked field by field before anything is applied.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

Nothing in a log is trusted: a commit is JSON lines written by rlarrow, another Delta writer,
or damage. :class:`CommitChecker` reads one commit's actions (``commitInfo``, ``protocol``,
``metaData``, ``add``, ``remove``) against the protocol's types (whole numbers from 0 to
2^63-1, strings, string maps; no NaN or Infinity tokens, no deep nesting, no unknown action)
and gives a :class:`CheckedCommit` to apply, or raises :class:`~rlarrow.core.errors.CorruptFileError`
naming the commit and the field, which :class:`~rlarrow.core.store.delta.DeltaLog` sets aside
as damage (docs/format.md, "Nothing in a log is trusted"). Split from ``delta.py``, which
writes and replays the log.

Example:
    >>> DeltaFile("part-0.parquet", rows=3, bytes=100, order="000000000001").rows
    3
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from rlarrow.core.errors import CorruptFileError
from rlarrow.core.store.manifest import decode_schema, is_plain_file_name

__all__: list[str] = []

#: The protocol versions rlarrow's logs need: no reader or writer table features.
PROTOCOL = {"minReaderVersion": 1, "minWriterVersion": 2}
#: The ``add.tags`` key of a file's order key.
ORDER_TAG = "rlarrow.order"
#: The ``metaData.configuration`` key of the table's Arrow schema.
SCHEMA_KEY = "rlarrow.schema"
#: Digits of one segment of an order key.
ORDER_SEGMENT_DIGITS = 12


@dataclass(frozen=True)
class DeltaFile:
    """One data file a Delta log lists: its name in the table directory, rows, bytes, order key."""

    name: str
    rows: int
    bytes: int
    order: str


def refuse_constant(name: str) -> Any:
    """``json.loads``' hook for ``NaN``/``Infinity``: not JSON, and Delta engines refuse them."""
    raise json.JSONDecodeError(f"{name} is not JSON (Delta engines refuse it)", name, 0)


#: The largest number a Delta ``long`` holds.
MAX_LONG = (1 << 63) - 1
_ORDER_KEY = re.compile(rf"(?:[0-9]{{{ORDER_SEGMENT_DIGITS}}})?(?:\.[0-9]{{{ORDER_SEGMENT_DIGITS}}})*")
_ACTIONS = ("commitInfo", "protocol", "metaData", "add", "remove")


@dataclass
class CheckedCommit:
    """One commit, checked: its store version and what it changes (nothing applied yet)."""

    store_version: int
    rebuilt: bool
    metadata: dict[str, Any] | None
    adds: list[DeltaFile]
    removes: list[str]


class CommitChecker:
    """The checks of one commit's actions: each wrong value is a CorruptFileError naming it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def bad(self, where: str, value: Any, want: str) -> CorruptFileError:
        """The CorruptFileError for ``value`` at ``where``, which should have been ``want``."""
        shown = repr(value) if not isinstance(value, dict | list) else type(value).__name__
        return CorruptFileError(self.path, f"is a damaged Delta commit: {where} is {shown:.80}, not {want} "
                                "(`rlarrow repair STORE --apply` sets the table's log aside and starts a new "
                                "one; the store's data is not affected)")

    def obj(self, value: Any, where: str) -> dict[str, Any]:
        """``value``, checked to be a JSON object."""
        if not isinstance(value, dict):
            raise self.bad(where, value, "a JSON object")
        return value

    def long(self, value: Any, where: str, *, optional: bool = False) -> int | None:
        """``value``, checked to be a Delta ``long`` (0 to 2^63-1); None where optional and absent."""
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LONG:
            raise self.bad(where, value, "a whole number from 0 to 2^63-1")
        return value

    def text(self, value: Any, where: str, *, optional: bool = False) -> str | None:
        """``value``, checked to be a string; None where optional and absent."""
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise self.bad(where, value, "a string")
        return value

    def flag(self, value: Any, where: str, *, optional: bool = False) -> bool | None:
        """``value``, checked to be true or false; None where optional and absent."""
        if value is None and optional:
            return None
        if not isinstance(value, bool):
            raise self.bad(where, value, "true or false")
        return value

    def texts(self, value: Any, where: str, *, optional: bool = False) -> dict[str, Any]:
        """A map of strings to strings, as the protocol's partitionValues, tags, configuration."""
        if value is None and optional:
            return {}
        for key, item in self.obj(value, where).items():
            self.text(item, f"{where}[{key!r:.40}]")  # (rlarrow writes no null there; deltalake refuses some)
        return dict(value)

    def json(self, value: Any, where: str) -> dict[str, Any]:
        """``value``, a string checked to hold a JSON object, decoded."""
        try:
            return self.obj(json.loads(self.text(value, where) or "", parse_constant=refuse_constant), where)
        except (ValueError, RecursionError):
            raise self.bad(where, value, "a JSON object") from None

    def name(self, action: dict[str, Any], where: str) -> str:
        """The file an ``add``/``remove`` action names, checked to be a plain name in the table directory."""
        raw = self.text(action.get("path"), f"{where}.path") or ""
        try:
            name = unquote(raw, errors="strict")
        except UnicodeDecodeError:
            name = raw
        if not is_plain_file_name(name):
            # (rlarrow never reads, renames or deletes a file outside the table directory)
            raise CorruptFileError(self.path, f"names the file {name!r:.200}, not a plain name in the table "
                                   "directory; rlarrow's Delta logs list only their own files")
        return name

    def commit(self, actions: list[dict[str, Any]]) -> CheckedCommit:
        """Every field rlarrow writes, of the type the protocol gives it (and rlarrow's own)."""
        info: dict[str, Any] | None = None
        metadata: dict[str, Any] | None = None
        adds: list[DeltaFile] = []
        removes: list[str] = []
        for i, action in enumerate(actions):
            kinds = [k for k in action if k in _ACTIONS]
            if len(action) != 1 or len(kinds) != 1:
                raise self.bad(f"line {i + 1}", sorted(action)[:4],
                               f"one of the actions rlarrow writes ({', '.join(_ACTIONS)})")
            kind = kinds[0]
            body = self.obj(action[kind], kind)
            if kind == "commitInfo":
                if info is not None:
                    raise self.bad("a second commitInfo", "", "one commitInfo per commit")
                info = body
                self.long(body.get("timestamp"), "commitInfo.timestamp", optional=True)
                self.text(body.get("operation"), "commitInfo.operation", optional=True)
            elif kind == "protocol":
                reader = self.long(body.get("minReaderVersion"), "protocol.minReaderVersion")
                writer = self.long(body.get("minWriterVersion"), "protocol.minWriterVersion")
                if set(body) - set(PROTOCOL) or (reader or 0) > PROTOCOL["minReaderVersion"] \
                        or (writer or 0) > PROTOCOL["minWriterVersion"]:
                    raise self.bad("protocol", body, f"{PROTOCOL} (rlarrow writes no table features)")
            elif kind == "metaData":
                self.text(body.get("id"), "metaData.id")
                self.text(body.get("name"), "metaData.name", optional=True)
                self.text(body.get("description"), "metaData.description", optional=True)
                fmt = self.obj(body.get("format"), "metaData.format")
                self.text(fmt.get("provider"), "metaData.format.provider")
                self.texts(fmt.get("options"), "metaData.format.options")
                self.json(body.get("schemaString"), "metaData.schemaString")
                columns = body.get("partitionColumns")
                if columns != []:
                    raise self.bad("metaData.partitionColumns", columns, "[] (rlarrow's tables are not "
                                   "partitioned)")
                config = self.texts(body.get("configuration"), "metaData.configuration")
                self.long(body.get("createdTime"), "metaData.createdTime", optional=True)
                if config.get(SCHEMA_KEY) is not None:
                    try:
                        decode_schema(config[SCHEMA_KEY])
                    except (ValueError, pa.ArrowException):
                        raise self.bad(f"metaData.configuration[{SCHEMA_KEY!r}]", config[SCHEMA_KEY],
                                       "an Arrow schema rlarrow wrote") from None
                metadata = body
            elif kind == "add":
                name = self.name(body, "add")
                if self.texts(body.get("partitionValues"), "add.partitionValues"):
                    raise self.bad("add.partitionValues", body["partitionValues"], "{}")
                size = self.long(body.get("size"), "add.size") or 0
                self.long(body.get("modificationTime"), "add.modificationTime")
                self.flag(body.get("dataChange"), "add.dataChange")
                rows = self.long(self.json(body.get("stats"), "add.stats").get("numRecords"),
                                 "add.stats.numRecords") or 0
                order = self.texts(body.get("tags"), "add.tags").get(ORDER_TAG)
                if not isinstance(order, str) or not order or len(order) > 64 * (ORDER_SEGMENT_DIGITS + 1) \
                        or not _ORDER_KEY.fullmatch(order):
                    raise self.bad(f"add.tags[{ORDER_TAG!r}]", order, "an order key rlarrow wrote")
                adds.append(DeltaFile(name, rows, size, order))
            else:
                removes.append(self.name(body, "remove"))
                self.flag(body.get("dataChange"), "remove.dataChange")
                self.long(body.get("deletionTimestamp"), "remove.deletionTimestamp", optional=True)
                self.flag(body.get("extendedFileMetadata"), "remove.extendedFileMetadata", optional=True)
                self.texts(body.get("partitionValues"), "remove.partitionValues", optional=True)
                self.long(body.get("size"), "remove.size", optional=True)
        if info is None:
            raise self.bad("its commitInfo", None, "there (rlarrow writes one in every commit)")
        marks = self.obj(info.get("rlarrow"), "commitInfo.rlarrow")
        store_version = self.long(marks.get("storeVersion"), "commitInfo.rlarrow.storeVersion") or 0
        self.text(marks.get("table"), "commitInfo.rlarrow.table", optional=True)
        rebuilt = bool(self.flag(marks.get("rebuilt"), "commitInfo.rlarrow.rebuilt", optional=True))
        return CheckedCommit(store_version, rebuilt, metadata, adds, removes)


