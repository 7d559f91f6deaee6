"""rlarrow's errors cross processes whole: DataLoader workers, multiprocessing and Ray tasks pickle them."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from rlarrow.core.errors import (
    ArgumentError,
    ArgumentTypeError,
    CorruptFileError,
    FormatVersionError,
    InvalidInputError,
    MissingDependencyError,
    NotFoundError,
    SchemaMismatchError,
    StoreError,
    TruncatedInputWarning,
    UnsupportedInputError,
    UsageError,
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
    ArgumentError("layout='fast': use 'binary', 'list' or 'auto'"),
    ArgumentTypeError("metadata must be a dict, got list"),
    NotFoundError("no tensor 'rewards' in the snapshot"),
    UsageError("step() after an episode ended: call reset() first"),
]


@pytest.mark.parametrize(("error", "builtin"), [(ArgumentError, ValueError), (ArgumentTypeError, TypeError),
                                                (NotFoundError, KeyError), (UsageError, RuntimeError)])
def test_argument_errors_are_also_the_builtin_callers_catch(error, builtin):
    with pytest.raises(builtin, match="^the message$"):  # (KeyError's quotes are not added)
        raise error("the message")


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
