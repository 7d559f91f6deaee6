"""rlarrow's errors cross processes whole: DataLoader workers, multiprocessing and Ray tasks pickle them."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from rlarrow.core.errors import (
    CorruptFileError,
    FormatVersionError,
    InvalidInputError,
    MissingDependencyError,
    SchemaMismatchError,
    StoreError,
    TruncatedInputWarning,
    UnsupportedInputError,
)

CASES = [
    SchemaMismatchError("steps", ["column 'is_first' must not be null"],
                        expected=pa.schema([("a", pa.int64())]), got=pa.schema([("a", pa.int32())])),
    InvalidInputError("/data/x.csv", "bad header"),
    UnsupportedInputError(None, "not a memory export"),
    CorruptFileError("/data/x.npz", "damaged member", offset=1234),
    FormatVersionError("too new"),
    StoreError("/s: no such store"),
    MissingDependencyError("needs ray", name="ray"),
    TruncatedInputWarning("/data/events", "ends in a partial record"),
]


@pytest.mark.parametrize("error", CASES, ids=lambda e: type(e).__name__)
def test_errors_pickle_with_their_message_and_attributes(error):
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    for name in ("table", "problems", "path", "offset", "name"):
        if hasattr(error, name):
            got, want = getattr(back, name), getattr(error, name)
            assert got == want, name
    if isinstance(error, SchemaMismatchError):
        assert back.expected.equals(error.expected) and back.got.equals(error.got)
