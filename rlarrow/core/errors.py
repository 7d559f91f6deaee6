"""Errors and warnings raised by rlarrow.

Every error rlarrow raises on purpose derives from :class:`RLArrowError`, so one
``except rlarrow.RLArrowError`` catches them all::

    RLArrowError
    ├── SchemaMismatchError      data does not fit a table's schema (all problems listed)
    ├── InvalidInputError        an input file or directory cannot be used
    │   ├── UnsupportedInputError    not a format rlarrow reads (or not an rlarrow file)
    │   └── CorruptFileError         truncated or damaged file (names file and offset/row)
    ├── FormatVersionError       written by an incompatible rlarrow format version
    ├── StoreError               store missing, already present, or in a state rlarrow refuses
    ├── OutputError              an export's file or directory could not be written (also an OSError)
    ├── MissingDependencyError   an optional extra is not installed (also a ModuleNotFoundError)
    ├── ArgumentError            a call with a value the function cannot use (also a ValueError)
    ├── ArgumentTypeError        a call with a value of a type it does not take (also a TypeError)
    ├── NotFoundError            a run, tensor, column or key that is not there (also a KeyError)
    └── UsageError               a call at the wrong moment, e.g. step() after the end (also a RuntimeError)

    RLArrowWarning
    ├── FormatVersionWarning     written by a newer minor format version
    ├── AssumptionWarning        an importer had to assume something the input does not say
    └── TruncatedInputWarning    an input ends in an incomplete record (what came before was read)

Each also derives from the builtin a caller would catch without rlarrow in mind
(``except ValueError`` still catches an :class:`ArgumentError`).

Errors from pyarrow, DuckDB and the file system are translated at the boundary
(``raise ... from exc``) and carry the path of the file involved.

The builtins rlarrow still raises itself, each where Python's own protocols want it
(``tests/test_layers.py`` holds the code to these and no others):

* ``IndexError`` from ``__getitem__`` of a sequence (iteration and slicing rely on it);
* ``AttributeError`` from a module's or class's ``__getattr__`` (``hasattr`` relies on it);
* ``NotImplementedError`` from a method a subclass must provide;
* ``StopIteration`` from ``__next__`` of an iterator;
* ``OSError`` and its subclasses (``FileNotFoundError``, ``FileExistsError``) for a
  file-system condition, as ``open()`` would report it (a glob that matches no file, a
  target that exists, a write the disk refused).

Example:
    >>> import rlarrow
    >>> try:
    ...     rlarrow.Store.open("no/such/store")
    ... except rlarrow.StoreError as exc:
    ...     print(type(exc).__name__)
    StoreError
"""

from __future__ import annotations

import os
from typing import Any

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "AssumptionWarning",
    "CorruptFileError",
    "FormatVersionError",
    "FormatVersionWarning",
    "InvalidInputError",
    "MissingDependencyError",
    "NotFoundError",
    "OutputError",
    "RLArrowError",
    "RLArrowWarning",
    "SchemaMismatchError",
    "StoreError",
    "TruncatedInputWarning",
    "UnsupportedInputError",
    "UsageError",
]


class RLArrowError(Exception):
    """Base class of every error rlarrow raises on purpose."""


class _Pickles:
    """Pickling for errors and warnings whose ``__init__`` takes more than their message.

    They cross processes whole: DataLoader workers, multiprocessing, Ray tasks.
    """

    args: tuple[Any, ...]

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.args, dict(self.__dict__))


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    err = cls.__new__(cls)
    BaseException.__init__(err, *args)
    err.__dict__.update(state)
    return err


class SchemaMismatchError(_Pickles, RLArrowError, ValueError):
    """Data does not match a table's schema.

    The message lists the problems, then, when both schemas are known, one line per
    column that differs (``observation: store has float32 (4,), data has uint8 (84, 84,
    3)``), never the whole schemas: those are in ``expected`` and ``got``.

    Attributes:
        table: the table the data was meant for.
        problems: every problem found, one line each.
        expected: the schema the data should have had (an Arrow schema, or the table's
            column description), or None.
        got: the data's schema, or None.
        differences: one line per column whose type differs, when the raiser compared
            two Arrow schemas (:func:`rlarrow.core.type_names.schema_differences`), or None.
    """

    def __init__(
        self,
        table: str,
        problems: list[str],
        *,
        expected: object = None,
        got: object = None,
        differences: list[str] | None = None,
    ) -> None:
        self.table = table
        self.problems = list(problems)
        self.expected = expected
        self.got = got
        self.differences = differences
        lines = [f"data for table {table!r} does not match its schema ({len(problems)} problem(s)):"]
        lines += [f"  - {p}" for p in problems]
        if differences is not None:
            lines.append("column by column (expected schema: the store's; got schema: the data's):")
            lines += [f"    {d}" for d in differences]
        elif expected is not None or got is not None:
            lines.append("expected schema: the table's columns (rlarrow.core.schema.table(name).describe()); "
                         "got schema: the data's (the error's .expected and .got)")
        super().__init__("\n".join(lines))


class InvalidInputError(_Pickles, RLArrowError, ValueError):
    """An input file or directory cannot be used.

    Attributes:
        path: the file or directory at fault.
    """

    def __init__(self, path: str | os.PathLike[str] | None, message: str) -> None:
        self.path = None if path is None else os.fspath(path)
        super().__init__(f"{self.path}: {message}" if self.path else message)


class UnsupportedInputError(InvalidInputError):
    """The input is not in a format rlarrow reads, or not an rlarrow file."""


class CorruptFileError(InvalidInputError):
    """The input is truncated or damaged.

    Attributes:
        offset: byte offset of the damage, when known.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        message: str,
        *,
        offset: int | None = None,
    ) -> None:
        self.offset = offset
        if offset is not None:
            message = f"at byte {offset}: {message}"
        super().__init__(path, message)


class FormatVersionError(RLArrowError):
    """A store or file was written with a format version this rlarrow cannot read as is."""


class StoreError(RLArrowError):
    """A store is missing, already exists, or is in a state rlarrow refuses to touch."""


class OutputError(_Pickles, RLArrowError, OSError):
    """An export's output (a file, a dataset directory) could not be written: full disk, quota, limit.

    Nothing partial is left at the target (:mod:`rlarrow.core.targets` writes every export
    under a temporary name and removes it on failure). It is also an ``OSError`` with the
    cause's ``errno``, so ``except OSError`` still catches it.

    Attributes:
        path: the file or directory the export was writing.
        reason: the cause in words (``No space left on device``).
    """

    def __init__(self, path: str | os.PathLike[str], message: str, *, reason: str = "",
                 errno_: int | None = None) -> None:
        OSError.__init__(self, f"{os.fspath(path)}: {message}")
        self.path = os.fspath(path)
        self.reason = reason
        self.errno = errno_
        self.filename = self.path

    def __str__(self) -> str:  # OSError would print "[Errno N] ..." when errno is set
        return str(self.args[0]) if self.args else ""


class MissingDependencyError(RLArrowError, ModuleNotFoundError):
    """An optional dependency is missing; the message names the extra to install."""


class ArgumentError(RLArrowError, ValueError):
    """A function was called with a value it cannot use: an unknown option, lengths that differ."""


class ArgumentTypeError(RLArrowError, TypeError):
    """A function was called with a value of a type it does not take."""


class NotFoundError(RLArrowError, KeyError):
    """A run, tensor, column, table or metadata key that is not there."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UsageError(RLArrowError, RuntimeError):
    """A call at a moment it cannot be made, e.g. ``step()`` after an episode ended."""


class RLArrowWarning(UserWarning):
    """Base class of rlarrow's warnings."""


class FormatVersionWarning(RLArrowWarning):
    """A store or file was written by a newer minor format version than this rlarrow knows."""


class AssumptionWarning(RLArrowWarning):
    """An importer assumed something its input does not say (the message says what)."""


class TruncatedInputWarning(_Pickles, RLArrowWarning):
    """An input ends in an incomplete record (a writer still running, or killed).

    Every complete record before it was read. Attributes: ``path``, the file.
    """

    def __init__(self, path: str | os.PathLike[str], message: str) -> None:
        self.path = os.fspath(path)
        super().__init__(f"{self.path}: {message}")


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())
