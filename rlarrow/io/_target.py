"""Export targets (kept for its importers): the helpers live in :mod:`rlarrow.core.targets`.

An export into a directory that already holds files would add to them (an envlogger
reader then sees every episode twice). So every export refuses a non-empty target unless
told to overwrite, and with ``overwrite`` the new files are written into a fresh sibling
directory that replaces the old one only once they are all written: a failure leaves the
old content as it was, and nothing partial.
"""

from __future__ import annotations

from rlarrow.core.targets import check_target, fresh_directory

__all__ = ["check_target", "fresh_directory"]
