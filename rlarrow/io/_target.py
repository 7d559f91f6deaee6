"""Export targets: refuse a directory that holds something, replace it whole on request.

An export into a directory that already holds files would add to them (an envlogger
reader then sees every episode twice). So every export refuses a non-empty target unless
told to overwrite, and with ``overwrite`` the new files are written into a fresh sibling
directory that replaces the old one only once they are all written: a failure leaves the
old content as it was.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from rlarrow.core.errors import InvalidInputError

__all__ = ["check_target", "fresh_directory"]


def check_target(directory: str | os.PathLike[str], *, overwrite: bool, what: str) -> Path:
    """``directory`` as a Path, after checking that an export may write into it.

    Args:
        directory: the directory the export writes.
        overwrite: whether its content may be replaced.
        what: what is exported (named in the error), e.g. ``"an envlogger export"``.

    Raises:
        InvalidInputError: ``directory`` is a file, or holds something and ``overwrite`` is false;
            the message names the directory and ``--overwrite`` / ``overwrite=True``.
    """
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise InvalidInputError(path, f"is a file, not a directory: {what} writes a directory; choose "
                                "another -o DIR")
    if not overwrite and path.is_dir():
        held = sorted(p.name for p in path.iterdir())
        if held:
            shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
            raise InvalidInputError(path, f"exists and is not empty (holds {shown}); {what} into it would "
                                    "mix with what is there. Choose an empty or new directory, or replace "
                                    "its content with --overwrite (overwrite=True in Python)")
    return path


@contextlib.contextmanager
def fresh_directory(directory: str | os.PathLike[str], *, overwrite: bool, what: str,
                    skip_empty: bool = False) -> Iterator[Path]:
    """Yield an empty directory to write into; it becomes ``directory`` when the block succeeds.

    The files are written into a hidden sibling directory. On success it takes
    ``directory``'s place (the old one, when ``overwrite`` allowed one, is moved aside and
    then deleted); on failure it is deleted and ``directory`` is left as it was. With
    ``skip_empty``, a block that wrote nothing leaves ``directory`` as it was too.

    Raises:
        InvalidInputError: see :func:`check_target`.
    """
    path = check_target(directory, overwrite=overwrite, what=what)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    tmp = path.parent / f".{path.name}.rlarrow-new-{token}"
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if skip_empty and not any(tmp.iterdir()):
        tmp.rmdir()
        return
    old = path.parent / f".{path.name}.rlarrow-old-{token}"
    if path.exists():
        os.replace(path, old)
    try:
        os.replace(tmp, path)
    except BaseException:
        if old.exists():
            os.replace(old, path)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
