"""One format to another without a store: ``rlarrow convert INPUT --to FORMAT -o OUTPUT``.

The input's format reads it to an episode source (:attr:`rlarrow.io.registry.Format.read`),
and the target format's writer (:attr:`~rlarrow.io.registry.Format.write`) writes the
source as it is read, a chunk at a time: nothing goes through a store, and memory holds
what one episode (or one block of steps) needs.

Example:
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "out"
    >>> convert_format("/nonexistent", "minari", out)
    Traceback (most recent call last):
    ...
    rlarrow.core.errors.UnsupportedInputError: /nonexistent: ...
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlarrow.core.errors import ArgumentError, UnsupportedInputError
from rlarrow.io import registry

__all__ = ["convert_format"]


def convert_format(source: str | os.PathLike[str], to: str, output: str | os.PathLike[str], *,
                   overwrite: bool = False, options: Any = None, writing: Any = None,
                   **write_options: Any) -> list[Path]:
    """Write the dataset at ``source`` as format ``to`` at ``output``; the paths written.

    Args:
        source: a dataset of a format with a reader (:func:`rlarrow.io.registry.readers`).
        to: the format to write (:func:`rlarrow.io.registry.writers`).
        output: where to write it (the format's own target: a directory, or a file).
        overwrite: replace what ``output`` holds (else a target that holds anything is refused).
        options: the reader's options: an instance of the source format's
            :attr:`~rlarrow.io.registry.Format.options` class (``RldsOptions(images="encoded")``),
            a mapping of them by format name (``rlarrow convert``'s), or (deprecated) an
            :class:`~rlarrow.io.registry.ImportOptions`; None: the defaults.
        writing: the writer's own options as one instance of the target's
            :attr:`~rlarrow.io.registry.Format.write_options` class (``LeRobotOptions(fps=10)``,
            what ``rlarrow convert --to`` builds); None: the keywords below, or the defaults.
        write_options: the writer's own options as keywords (``data_format="arrow"`` for Minari,
            ``fps=10`` for LeRobot, ...), instead of ``writing``.

    Raises:
        UnsupportedInputError: ``source`` is of no format rlarrow reads to episodes.
        ArgumentError: ``to`` is no format rlarrow writes episodes as, or ``writing`` that is
            not its writer's options (or given with keywords).
    """
    target = registry.get(to)
    if target.write is None:
        raise ArgumentError(f"to={to!r}: rlarrow does not write {to} from episodes; it writes "
                            f"{', '.join(f.name for f in registry.writers())}")
    found = registry.detect(source)
    if found is None or found.read is None:
        what = ("no dataset rlarrow recognises" if found is None
                else f"{found.name}, which has no episode reader")
        raise UnsupportedInputError(source, f"{what}; a dataset converted to another format is one of "
                                    f"{', '.join(f.noun or f.name for f in registry.readers())}")
    if writing is not None:
        write_options = _writing(target, writing, write_options)
    with found.read(Path(source), _reading(found, options)) as episodes:
        return target.write(episodes, output, overwrite=overwrite, **write_options)


def _writing(target: registry.Format, writing: Any, keywords: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords ``target``'s writer is given: the fields of ``writing`` (see :func:`convert_format`)."""
    cls = target.write_options_type()
    if cls is None or not isinstance(writing, cls) or not dataclasses.is_dataclass(writing):
        takes = "no options" if cls is None else f"a {cls.__module__}.{cls.__name__}"
        raise ArgumentError(f"writing={writing!r}: the {target.name} writer takes {takes}")
    if keywords:
        raise ArgumentError(f"convert_format: give the {target.name} writer's options in writing= or as "
                            f"keywords ({', '.join(keywords)}), not both")
    return {f.name: getattr(writing, f.name) for f in dataclasses.fields(writing)}


def _reading(fmt: registry.Format, options: Any) -> registry.ImportRun:
    """What ``fmt``'s reader is given: its own options out of ``options`` (see :func:`convert_format`)."""
    if isinstance(options, registry.ImportOptions):
        return options.run(fmt)
    if isinstance(options, Mapping):
        options = options.get(fmt.name, options.get(fmt.group))
    cls = fmt.options_type()
    if options is not None and (cls is None or not isinstance(options, cls)):
        takes = "no options" if cls is None else f"a {cls.__name__}"
        raise ArgumentError(f"options={options!r}: the {fmt.name} reader takes {takes}")
    return registry.ImportRun(options=options)
