"""Names that come from an input or go into an output, kept inside their directory, and bounded work.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

An importer opens files that the input itself names (a LeRobot ``data_path`` template, a
feature key in a video path, an RLDS label file that may be a symlink); an exporter names
files after the store's fields. Neither may reach outside its directory, whatever the names
hold, and a few bytes of input may not ask for gigabytes:

- :func:`inside`: a name of an input resolved under the input's directory, symlinks followed
  one link at a time *without* looking at anything outside (an ``lstat`` or ``stat`` of a
  path outside would already be an access), refused when it leaves;
- :func:`listed`: the entries of a folder of an input, each one confined as :func:`inside` does;
- :func:`file_name_part`: a field name that becomes one file or folder name of an export,
  refused when it holds a path separator, is ``.`` or ``..``, or holds a NUL;
- :func:`check_template`: a ``str.format`` path template from an input, refused when a width
  or precision is larger than :data:`MAX_FORMAT_WIDTH` or it reaches into attributes;
- :func:`inflate`: zlib data decompressed to at most the size its declared shape gives;
- :data:`MAX_IMAGE_PIXELS`: the largest image (or video frame) an importer decodes.

Example:
    >>> file_name_part("observation.images.top", what="feature", fix="rename it")
    'observation.images.top'
    >>> check_template("data/chunk-{chunk_index:03d}.parquet", source="info.json")
"""

from __future__ import annotations

import os
import re
import stat
import string
import zlib
from pathlib import Path

from rlarrow.core.errors import CorruptFileError, InvalidInputError

__all__: list[str] = []

#: the widest field (width or precision) a path template of an input may ask for: a file name
#: is at most 255 bytes on every common file system
MAX_FORMAT_WIDTH = 255
#: the most pixels (height x width) of one image or video frame an importer decodes: Pillow's
#: own default ``Image.MAX_IMAGE_PIXELS`` (about 256 MiB of RGB)
MAX_IMAGE_PIXELS = 89_478_485
#: deflate's largest expansion (output bytes per input byte): zlib data of n bytes cannot hold
#: more than about 1032 n, so a declared size beyond that is refused before decompressing
DEFLATE_RATIO = 1032
#: the largest tensor an importer inflates from zlib data (a TFDS ``Tensor`` of ``encoding: zlib``)
MAX_INFLATED_BYTES = 256 << 20
_HOPS = 40  # symlinks followed in one name, as the kernel's own limit


def inside(
    root: str | os.PathLike[str],
    name: str | os.PathLike[str],
    *,
    source: str | os.PathLike[str] | None = None,
    what: str = "the file",
) -> Path:
    """The path ``name`` (relative to ``root``) leads to, if it stays inside ``root``.

    Symlinks are followed one at a time, each target judged by its text before anything it
    names is looked at, so nothing outside ``root`` is ever touched. A name that does not exist
    comes back as it is (opening it then says so).

    Raises:
        InvalidInputError: ``name`` is absolute, holds a NUL, or leads outside ``root`` (through
            ``..`` or a symlink); the error names ``source`` (the file holding the name, else
            ``root``) and ``name``.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> inside(d, "data/file.parquet") == Path(os.path.realpath(d)) / "data" / "file.parquet"
        True
        >>> inside(d, "../secret")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        rlarrow.core.errors.InvalidInputError: ...: the file '../secret' leads outside ...
    """
    text = os.fspath(name)
    base = Path(os.path.realpath(root))

    def refuse(why: str) -> InvalidInputError:
        return InvalidInputError(
            source if source is not None else root,
            f"{what} {text!r} {why}: rlarrow reads only files inside the input's directory {base}; "
            "fix the name, or copy the file into that directory",
        )

    if "\x00" in text:
        raise refuse("holds a NUL character")
    if os.path.isabs(text):
        raise refuse("is an absolute path")
    current, pending, hops = base, list(Path(text).parts), 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if current == base:
                raise refuse("leads outside it (by '..' or a symlink)")
            current = current.parent
            continue
        step = current / part
        try:
            mode = os.lstat(step).st_mode
        except OSError:  # missing (or not a folder on the way): the open says so
            current = step
            continue
        if not stat.S_ISLNK(mode):
            current = step
            continue
        hops += 1
        if hops > _HOPS:
            raise refuse("is a loop of symlinks")
        target = os.readlink(step)
        if os.path.isabs(target):
            lexical = Path(os.path.normpath(target))
            if lexical != base and base not in lexical.parents:
                raise refuse(f"leads outside it (a symlink to {target})")
            current, pending = base, list(lexical.relative_to(base).parts) + pending
        else:
            pending = list(Path(target).parts) + pending
    return current


def file_name_part(name: str, *, what: str, fix: str) -> str:
    """``name`` if it can be one file or folder name inside an export's directory.

    Raises:
        InvalidInputError: ``name`` is empty, ``.`` or ``..``, or holds a slash, a backslash or a NUL
            (it would name a file outside the export, or none); the message says ``fix``.

    Example:
        >>> file_name_part("../../etc", what="feature", fix="rename it")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        rlarrow.core.errors.InvalidInputError: feature '../../etc' ...
    """
    bad = not name or name in (".", "..") or any(c in name for c in "/\\\x00")
    if bad:
        raise InvalidInputError(
            None,
            f"{what} {name!r} cannot be a file name of the export (it is empty, '.' or '..', or holds "
            f"a path separator or NUL, so it would name a file outside the output directory): {fix}",
        )
    return name


_SPEC_NUMBER = re.compile(r"\d+")


def check_template(template: str, *, source: str | os.PathLike[str]) -> None:
    """Refuse a ``str.format`` path template of an input that asks for huge fields or attributes.

    Only plain ``{name}`` fields with a format spec of widths and precisions up to
    :data:`MAX_FORMAT_WIDTH` are filled in: ``{chunk_index:0600000000d}`` would allocate
    600 MB for one file name.

    Raises:
        CorruptFileError: naming ``source`` and the template.
    """

    def refuse(why: str) -> CorruptFileError:
        return CorruptFileError(
            source,
            f"the path template {template!r} {why}: the dataset is damaged or hostile; fix the template",
        )

    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise refuse(f"cannot be read ({exc})") from exc
    for _, field_name, spec, conversion in fields:
        if field_name is None:
            continue
        if not field_name.isidentifier():
            raise refuse(f"has a field {field_name!r}: only plain names are filled in")
        if conversion is not None or "{" in (spec or ""):
            raise refuse(f"has a field {field_name!r} with a conversion or nested spec")
        widths = [int(n) for n in _SPEC_NUMBER.findall(spec or "")]
        if any(w > MAX_FORMAT_WIDTH for w in widths):
            raise refuse(f"asks for a field {max(widths)} characters wide (at most {MAX_FORMAT_WIDTH})")


def inflate(data: bytes, size: int, *, source: str | os.PathLike[str], what: str) -> bytes:
    """Zlib ``data`` decompressed, which must give exactly ``size`` bytes; never more is produced.

    A ``size`` that ``data`` cannot hold (deflate expands at most :data:`DEFLATE_RATIO` times),
    or beyond :data:`MAX_INFLATED_BYTES`, is refused before decompressing.

    Raises:
        CorruptFileError: not zlib data, or another size than ``size``.

    Example:
        >>> len(inflate(zlib.compress(bytes(8)), 8, source="x", what="t"))
        8
    """
    if size > DEFLATE_RATIO * len(data) + 64:
        raise CorruptFileError(
            source, f"{what}: {len(data)} bytes of zlib data cannot hold the {size} bytes its shape declares"
        )
    if size > MAX_INFLATED_BYTES:
        raise CorruptFileError(
            source,
            f"{what}: its shape declares {size} bytes; rlarrow inflates tensors "
            f"of at most {MAX_INFLATED_BYTES} bytes",
        )
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, size + 1)
    except zlib.error as exc:
        raise CorruptFileError(source, f"{what} is not zlib data ({exc})") from exc
    if len(out) != size or not d.eof:
        raise CorruptFileError(
            source, f"{what} holds a tensor of another size than the {size} bytes its shape declares"
        )
    return out


def png_size(blob: bytes) -> tuple[int, int] | None:
    """(height, width) from a PNG's header (its IHDR chunk), before anything is decoded; None if not a PNG.

    Example:
        >>> header = bytes.fromhex("89504e470d0a1a0a 0000000d") + b"IHDR" + bytes.fromhex("00000003 00000002")
        >>> png_size(header)
        (2, 3)
    """
    if len(blob) < 24 or blob[:8] != b"\x89PNG\r\n\x1a\n" or blob[12:16] != b"IHDR":
        return None
    return int.from_bytes(blob[20:24], "big"), int.from_bytes(blob[16:20], "big")


def listed(
    root: str | os.PathLike[str],
    folder: str | os.PathLike[str],
    pattern: str = "*",
    *,
    what: str = "the file",
) -> list[tuple[str, Path]]:
    """The entries of ``folder`` (relative to ``root``) whose name matches ``pattern``, confined to ``root``.

    ``(name, path)`` pairs sorted by name: ``name`` as listed, ``path`` where it leads
    (:func:`inside`), so an entry that is a symlink is judged by its text before anything it
    names is touched, and a ``glob`` never lists a folder outside ``root``. A folder that is
    missing lists nothing. Entries that do not match ``pattern`` are not looked at.

    Raises:
        InvalidInputError: ``folder``, or a matching entry, leads outside ``root`` (naming it).

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> os.mkdir(os.path.join(d, "ep"))
        >>> os.symlink("ep", os.path.join(d, "0"))
        >>> [(n, p.name) for n, p in listed(d, ".", "[0-9]*")]
        [('0', 'ep')]
    """
    import fnmatch

    directory = inside(root, folder, what=what)
    try:
        names = sorted(os.listdir(directory))
    except OSError:  # missing, or not a folder
        return []
    below = directory.relative_to(os.path.realpath(root))
    return [(name, inside(root, below / name, what=what))
            for name in names if fnmatch.fnmatchcase(name, pattern)]
