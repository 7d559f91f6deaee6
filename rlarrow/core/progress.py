"""Progress bars for long work (tqdm), shown only where someone can see them.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__: list[str] = []


class _NoBar:
    """What :func:`bar` returns when no bar is shown: the same calls, doing nothing."""

    def update(self, n: float = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def bar(total: float | None, desc: str, unit: str = "B", progress: bool | None = None) -> Any:
    """A tqdm bar (or a do-nothing stand-in).

    ``progress``: True always shows it, False never, None only when stderr is a terminal.
    ``unit="B"`` counts bytes (scaled to kB/MB).
    """
    if progress is False:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", unit_divisor=1024,
                disable=None if progress is None else False, leave=progress is not None, dynamic_ncols=True)


def iterate(items: Sequence[Any], desc: str, unit: str, progress: bool | None) -> Iterable[Any]:
    """Iterate ``items`` with a bar (see :func:`bar`); no bar for fewer than 2 items."""
    if progress is False or len(items) < 2:
        return items
    from tqdm.auto import tqdm

    wrapped: Iterable[Any] = tqdm(items, desc=desc, unit=unit, disable=None if progress is None else False,
                                  leave=False)
    return wrapped
