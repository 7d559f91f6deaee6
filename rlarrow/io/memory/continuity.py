"""Whether one export of a PPO rollout memory follows another, from the advantages it carries.

A memory without ``next_states`` (skrl's PPO: observations, actions, rewards, terminated,
truncated, log_prob, values, returns, advantages) shows no state to chain two exports by. It
carries another link instead. skrl exports the memory as it fills, inside ``add_samples``,
before the update that computes the rollout's returns and advantages (GAE); so export ``k``
holds the ``values`` of rollout ``k`` next to the ``returns`` and ``advantages`` computed from
rollout ``k - 1``, which were never overwritten. Where nothing is missing in between::

    advantages[k] = (returns[k] - values[k-1] - mean) / (std + 1e-8)

element for element over the whole ``(memory_size, num_envs)`` tensor (returns = unnormalised
advantages + values; the advantages normalised over the rollout). A value preprocessor (skrl's
``RunningStandardScaler``) stores the returns scaled, so the relation is checked as an affine
one: ``advantages[k] = a * returns[k] + b * values[k-1] + c`` for some ``a, b, c``, fitted by
least squares. Measured on real skrl 2.1 PPO runs (CartPole, with and without the scaler):
consecutive exports fit to 4e-7, every other pair of the same run misses by 2.6e-2 or more.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlarrow.io.memory.snapshot import MemorySnapshot

__all__: list[str] = []

#: the tensors a PPO rollout memory holds for the check (skrl 1 and 2 name them alike)
GAE_TENSORS = ("values", "returns", "advantages")
#: largest residual of a fit that still means "consecutive" (advantages are normalised: ~1)
_TOLERANCE = 1e-4
#: ``RunningStandardScaler`` clips scaled values at 5: such rows cannot fit and are left out
_CLIPPED = 4.99


def follows_by_gae(prev: MemorySnapshot, nxt: MemorySnapshot) -> bool | None:
    """Whether ``nxt`` is the export right after ``prev`` by their advantages, or None if it cannot tell.

    None: a snapshot lacks one of :data:`GAE_TENSORS` or their shapes differ, or ``nxt``'s
    returns are not all finite (skrl's memory starts as NaN: the first fill has no returns yet).

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> def snap(values, returns, advantages):
        ...     return MemorySnapshot({"rewards": np.zeros_like(values), "values": values,
        ...                            "returns": returns, "advantages": advantages})
        >>> v0, v1 = rng.normal(size=(2, 8, 2, 1)).astype(np.float32)
        >>> adv = rng.normal(size=(8, 2, 1)).astype(np.float32)
        >>> norm = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
        >>> first = snap(v0, np.full_like(v0, np.nan), np.full_like(v0, np.nan))
        >>> second = snap(v1, adv + v0, norm)
        >>> follows_by_gae(first, second), follows_by_gae(second, first), follows_by_gae(second, second)
        (True, None, False)
    """
    if not all(name in prev.tensors and name in nxt.tensors for name in GAE_TENSORS):
        return None
    values = np.asarray(prev.tensors["values"], np.float64)
    returns = np.asarray(nxt.tensors["returns"], np.float64)
    advantages = np.asarray(nxt.tensors["advantages"], np.float64)
    if not values.shape == returns.shape == advantages.shape or not values.size:
        return None
    if not (np.isfinite(returns).all() and np.isfinite(advantages).all() and np.isfinite(values).all()):
        return None
    r, v, a = returns.ravel(), values.ravel(), advantages.ravel()
    keep = np.abs(r) < _CLIPPED if (np.abs(r) >= _CLIPPED).any() and np.abs(r).max() <= 5.0 + 1e-6 else None
    fits = _fits(r, v, a)
    if not fits and keep is not None and keep.sum() > 3:
        fits = _fits(r[keep], v[keep], a[keep])
    return fits


def _fits(r: np.ndarray, v: np.ndarray, a: np.ndarray) -> bool:
    """``a`` is an affine function of ``r`` and ``v``, to :data:`_TOLERANCE` everywhere."""
    x = np.stack([r, v, np.ones_like(r)], axis=1)
    coef, *_ = np.linalg.lstsq(x, a, rcond=None)
    return bool(np.abs(x @ coef - a).max() <= _TOLERANCE)


def gae_links(snaps: Sequence[MemorySnapshot]) -> list[bool | None] | None:
    """:func:`follows_by_gae` for each pair of neighbours, or None where no pair fits.

    A pair's failure means a missing export only in a series that shows the relation at all
    (a memory with the three tensors but another algorithm's meaning, or a memory larger than
    one rollout, fits nowhere): so unless one pair fits, nothing is claimed.
    """
    links = [follows_by_gae(snaps[k - 1], snaps[k]) for k in range(1, len(snaps))]
    return links if any(link is True for link in links) else None
