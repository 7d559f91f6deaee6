"""Arguments checked where they enter the public API, each error naming the argument.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

One place for what every public function that takes ids, names or counts needs: a bare
string given where a list is expected is *one* id (never a list of its characters), and
a wrong type, an empty name, a NaN or a count below its minimum is an
:class:`~rlarrow.core.errors.ArgumentError` (or :class:`~rlarrow.core.errors.ArgumentTypeError`)
that says which argument and what it takes.

Example:
    >>> from rlarrow.core.arguments import names, integer
    >>> names("r0", "runs")
    ['r0']
    >>> names(("a", "b"), "runs")
    ['a', 'b']
    >>> integer(0, "batch_size", minimum=1)
    Traceback (most recent call last):
    ...
    rlarrow.core.errors.ArgumentError: batch_size=0: give an integer of at least 1
"""

from __future__ import annotations

import math
import numbers
import os
import re
from collections.abc import Iterable
from typing import Any, overload

from rlarrow.core.errors import ArgumentError, ArgumentTypeError

__all__: list[str] = []


@overload
def names(value: None, argument: str, *, what: str = ...) -> None: ...
@overload
def names(value: str | Iterable[Any], argument: str, *, what: str = ...) -> list[str]: ...
def names(value: Any, argument: str, *, what: str = "name") -> list[str] | None:
    """``value`` as a list of non-empty strings: a bare string is one; None stays None.

    Raises:
        ArgumentTypeError: ``value`` is not a string or an iterable of strings (bytes,
            a number, a mapping, an item that is not a string).
        ArgumentError: an empty string among them.
    """
    if value is None:
        return None
    if isinstance(value, str):
        items: list[Any] = [value]
    elif isinstance(value, (bytes, bytearray, memoryview)) or isinstance(value, dict) \
            or not isinstance(value, Iterable):
        raise ArgumentTypeError(f"{argument}: give a {what} (a string) or a list of them, "
                                f"not {type(value).__name__} {value!r:.60}")
    else:
        items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise ArgumentTypeError(f"{argument}: each {what} must be a string, not "
                                    f"{type(item).__name__} {item!r:.60}")
        if not item:
            raise ArgumentError(f"{argument}: an empty {what} (''): give the {what} itself")
    return items


def text(value: Any, argument: str, *, what: str = "a string") -> str:
    """``value`` if it is a non-empty string, else an error naming ``argument``."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{argument}: give {what}, not {type(value).__name__} {value!r:.60}")
    if not value:
        raise ArgumentError(f"{argument}: an empty string: give {what}")
    return value


def integer(value: Any, argument: str, *, minimum: int | None = None) -> int:
    """``value`` as an int (a bool or a float is refused), at least ``minimum`` when given."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{argument}: give an integer, not {type(value).__name__} {value!r:.60}")
    result = int(value)
    if minimum is not None and result < minimum:
        raise ArgumentError(f"{argument}={result}: give an integer of at least {minimum}")
    return result


def number(value: Any, argument: str, *, minimum: float | None = None, above: bool = False) -> float:
    """``value`` as a finite float, at least (``above``: more than) ``minimum`` when given."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{argument}: give a number, not {type(value).__name__} {value!r:.60}")
    result = float(value)
    if not math.isfinite(result):
        raise ArgumentError(f"{argument}={result}: give a finite number")
    if minimum is not None and (result <= minimum if above else result < minimum):
        raise ArgumentError(f"{argument}={result}: give a number {'above' if above else 'of at least'} "
                            f"{minimum:g}")
    return result


_URI = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+)://")


def uri_scheme(location: object) -> str | None:
    """The scheme of ``location`` when it is a URI (``s3://bucket/x``: ``"s3"``), else None.

    A local path (``runs.rlarrow``, ``C:/data``, a ``Path``) has none: ``pathlib`` would turn
    ``s3://bucket/x`` into the local path ``s3:/bucket/x``, so callers ask this first.

    Example:
        >>> uri_scheme("s3://bucket/runs.rlarrow"), uri_scheme("runs.rlarrow")
        ('s3', None)
    """
    if not isinstance(location, (str, os.PathLike)):
        return None
    text = os.fspath(location)
    found = _URI.match(text) if isinstance(text, str) else None
    return found.group(1).lower() if found else None


def object_storage_refusal(location: object, what: str, *, kind: str = "store") -> str | None:
    """Why ``what`` cannot be at ``location`` when it is a URI (the error's text), else None.

    Writing to object storage (``s3://``, ``gs://``, ``az://``, ``hf://``...) is not supported
    yet: the text says so, that nothing was made locally, and how to get the data there today.
    ``kind``: ``"store"`` (a store to write: write it locally, then ``rlarrow push``),
    ``"open"`` (a store to open: a pushed one is read with ``RemoteStore``) or ``"output"``
    (an export's file or directory: write locally, then copy). A ``file://`` URI is told to
    give the path.

    Example:
        >>> print(object_storage_refusal("runs.rlarrow", "a store"))
        None
        >>> object_storage_refusal("s3://b/runs.rlarrow", "a store").split(";")[0]
        's3://b/runs.rlarrow: rlarrow cannot write a store to object storage (s3://) yet'
    """
    scheme = uri_scheme(location)
    if scheme is None:
        return None
    text = str(os.fspath(location))  # type: ignore[call-overload]
    if scheme == "file":
        return (f"{text}: {what} is a local directory here: give its path ({text[len('file://'):]!r}), "
                "not a file:// URI (rlarrow.core.remote.RemoteStore reads a pushed store at a URI)")
    nothing = f"nothing was created (no local directory {scheme + ':'!r})"
    push = f"`rlarrow push LOCAL_STORE {text}` (rlarrow.core.remote.push)"
    if kind == "open":
        return (f"{text}: rlarrow.Store opens a local directory, not object storage ({scheme}://); read a "
                f"store pushed there with rlarrow.core.remote.RemoteStore({text!r}) (rlarrow.sql, connect, "
                f"scan, Reader, StreamingDataset and rlarrow.train.ray take the URI itself). A store there "
                f"is not writable yet: write it locally, then {push}; {nothing}")
    if kind == "output":
        fix = ("Write it to a local directory, then copy that to the bucket (pyarrow.fs.copy_files, or the "
               "storage's own tools)")
    else:
        fix = (f"Write it to a local directory, then copy it to the bucket with {push}; read the copy there "
               f"with rlarrow.core.remote.RemoteStore({text!r})")
    return f"{text}: rlarrow cannot write {what} to object storage ({scheme}://) yet; {nothing}. {fix}"
