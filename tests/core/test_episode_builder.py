"""The one episode builder (rlarrow.core.episode_builder): flags, layout, returns, outcome."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rlarrow.core.alignment import last_null
from rlarrow.core.episode_builder import Transitions, outcome, returns, step_flags
from rlarrow.core.errors import ArgumentError
from rlarrow.core.tensors import to_arrow, to_numpy


def test_step_flags_skip_empty_episodes_and_continue_steps():
    f = step_flags([2, 0, 3], first_step=[4, 0, 0], is_last=[True, True, False],
                   is_terminal=[True, True, False])
    assert f["episode"].tolist() == [0, 0, 2, 2, 2]
    assert f["step"].tolist() == [4, 5, 0, 1, 2]
    assert f["is_first"].tolist() == [False, False, True, False, False]
    assert f["is_last"].tolist() == [False, True, False, False, False]
    assert f["is_terminal"].tolist() == [False, True, False, False, False]


def test_transitions_lay_out_final_steps_after_each_end():
    t = Transitions(5, [0, 3])  # episodes: [0] ends, [1, 2, 3] ends, [4] open
    assert t.total == 7
    assert t.src.tolist() == [0, 2, 3, 4, 6] and t.fin.tolist() == [1, 5]
    assert t.lengths.tolist() == [2, 4, 1]
    f = t.flags(first_step=3, terminal=[False, True])
    assert f["step"].tolist() == [3, 4, 0, 1, 2, 3, 0]
    assert f["is_last"].tolist() == [False, True, False, False, False, True, False]
    assert f["is_terminal"].tolist() == [False, False, False, False, False, True, False]
    obs = t.spread(np.arange(5, dtype=np.float32)[:, None] + 1, finals=[np.array([9.0]), None])
    assert obs[:, 0].tolist() == [1.0, 9.0, 2.0, 3.0, 4.0, 0.0, 5.0]


@pytest.mark.parametrize("values", [np.arange(6, dtype=np.float64),
                                    np.arange(12, dtype=np.int64).reshape(6, 2),
                                    np.arange(24, dtype=np.float32).reshape(6, 2, 2)])
def test_last_null_by_mask_keeps_type_and_values(values):
    t = Transitions(4, [1, 3])
    col = to_arrow(t.spread(values[:4]))
    out = t.last_null(col)
    assert out.type == col.type
    assert [v is None for v in out.to_pylist()] == t.is_final.tolist()
    back = to_numpy(out.filter(pa.array(~t.is_final)))
    assert np.array_equal(back, values[:4]) and back.dtype == values.dtype


def test_last_null_mask_of_other_length_is_refused():
    with pytest.raises(ArgumentError, match="mask of 2 rows"):
        last_null(pa.array([1, 2, 3]), [True, False])


def test_returns_is_the_float64_sum_of_each_episode():
    rewards = np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 1e3
    starts = [0, 10, 700]
    got = returns(rewards, starts)
    want = [np.sum(part, dtype=np.float64) for part in np.split(rewards, starts[1:])]
    assert got.dtype == np.float64 and got.tolist() == [float(w) for w in want]
    assert returns(np.zeros(0), [0]).tolist() == [0.0]


def test_outcome_from_ended_and_terminated():
    got = outcome(ended=[True, True, False], terminated=[True, False, False])
    assert got["truncated"].tolist() == [False, True, False]
    assert got["partial_end"].tolist() == [False, False, True]
    kept = outcome(ended=True, terminated=True, truncated=True)  # Minari may set both
    assert kept == {"terminated": True, "truncated": True, "partial_end": False}
