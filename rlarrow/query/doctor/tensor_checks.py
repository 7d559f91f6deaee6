"""The data doctor's checks of tensors, in NumPy over record batches: ``nonfinite``, ``frozen``, ``spikes``.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

Observations and actions are read a few row groups at a time from each ``steps`` layout
(both tensor layouts, dict observations field by field), so memory stays bounded whatever
the store's size; ``reward`` and ``discount`` are checked in SQL. :data:`TENSOR_CHECKS`
declares them (:mod:`rlarrow.query.doctor` tells what each finds).

Example:
    >>> [c.name for c in TENSOR_CHECKS]
    ['nonfinite', 'frozen', 'spikes']
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from rlarrow.query.doctor.context import Check, Context

__all__: list[str] = []

def _valid(arr: pa.Array, parent: np.ndarray | None) -> np.ndarray:
    own = (np.ones(len(arr), bool) if arr.null_count == 0
           else np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool))
    return own if parent is None else own & parent


def _float_leaves(name: str, arr: pa.Array, parent: np.ndarray | None = None) -> Iterator[
        tuple[str, np.ndarray, np.ndarray]]:
    """Each float tensor of ``arr`` (a struct's fields, at any depth) as ``(name, values, valid rows)``.

    ``values`` is ``(rows, *shape)`` with null rows filled with 0 (``valid`` says which rows hold
    a value); both layouts, zero-copy where Arrow allows.
    """
    from rlarrow.core.tensors import TensorType, tensor_dtype, to_numpy

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    type_ = arr.type
    valid = _valid(arr, parent)
    if pa.types.is_struct(type_):
        for i, f in enumerate(type_):
            yield from _float_leaves(f"{name}.{f.name}", arr.field(i), valid)
        return
    if not (type_.numpy_dtype.kind == "f" if isinstance(type_, TensorType)
            else pa.types.is_floating(tensor_dtype(type_))):
        return
    yield name, np.asarray(to_numpy(arr, fill_value=0)), valid


def _element(shape: tuple[int, ...], flat_index: int) -> str:
    """``[i, j]`` for an element of a tensor of ``shape`` ('' for a scalar)."""
    if not shape:
        return ""
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat_index, shape)) + "]"


def _keys(batch: pa.RecordBatch, rows: np.ndarray) -> list[tuple[str, int, int]]:
    taken = batch.select(["run_id", "episode_id", "step"]).take(pa.array(rows, pa.int64()))
    return list(zip(taken.column(0).to_pylist(), taken.column(1).to_pylist(), taken.column(2).to_pylist(),
                    strict=True))


def _tensor_columns(ctx: Context, layout: int, wanted: Sequence[str]) -> list[str]:
    schema = ctx.st.schema("steps", layout=layout)
    return [c for c in wanted if schema is not None and c in schema.names]


def _nonfinite(ctx: Context) -> None:
    ctx.emit_sql("""
        select 'error' as severity, 'steps' as tbl, run_id, episode_id, step,
               concat_ws('; ', case when isnan(reward) or isinf(reward) then 'reward is ' || reward end,
                         case when isnan(discount) or isinf(discount) then 'discount is ' || discount end)
                   as message
        from steps where isnan(reward) or isinf(reward) or isnan(discount) or isinf(discount)""")
    for _, layout in ctx.layouts("steps"):
        columns = _tensor_columns(ctx, layout, ("observation", "action"))
        if not columns:
            continue
        for batch in ctx.batches("steps", layout, ["run_id", "episode_id", "step", *columns]):
            for column in columns:
                for name, values, valid in _float_leaves(column, batch.column(column)):
                    flat = values.reshape(len(values), -1)
                    bad_elements = ~np.isfinite(flat)
                    bad = np.flatnonzero(bad_elements.any(axis=1) & valid)
                    if not len(bad):
                        continue
                    room = ctx.tally.room(ctx.check)
                    ctx.tally.count(ctx.check, "error", max(len(bad) - max(room, 0), 0))
                    bad = bad[:max(room, 0)]
                    for row, (run_id, episode_id, step) in zip(bad.tolist(), _keys(batch, bad), strict=True):
                        first = int(np.argmax(bad_elements[row]))
                        n_bad = int(bad_elements[row].sum())
                        size = flat.shape[1]
                        ctx.emit("error", "steps", run_id, episode_id, step,
                                 f"{name}{_element(values.shape[1:], first)} is {flat[row, first]}"
                                 + (f" ({n_bad} of {size} elements not finite)" if size > 1 else ""))


def _frozen(ctx: Context) -> None:
    for view, layout in ctx.layouts("steps"):
        if not _tensor_columns(ctx, layout, ("observation",)):
            continue
        # runs of equal hashes (consecutive steps: step - rank within the hash is constant),
        # then each run longer than frozen_steps confirmed by comparing the values themselves
        ctx.emit_sql(f"""
            with h as (select run_id, episode_id, step, hash(observation) as h from {view}
                       where observation is not null),
            c as (select run_id, episode_id, min(step) as s0, max(step) as s1, count(*) as n
                  from (select *, step - row_number() over (partition by run_id, episode_id, h
                                                            order by step) as grp from h)
                  group by run_id, episode_id, h, grp having count(*) > {int(ctx.frozen_steps)})
            select 'warning' as severity, 'steps' as tbl, c.run_id, c.episode_id, c.s0 as step,
                   'the same observation for ' || c.n || ' consecutive steps (' || c.s0 || ' to ' || c.s1
                   || '; frozen_steps=' || {int(ctx.frozen_steps)} || ')' as message
            from c join {view} v on v.run_id = c.run_id and v.episode_id = c.episode_id
                and v.step between c.s0 and c.s1
            group by c.run_id, c.episode_id, c.s0, c.s1, c.n having count(distinct v.observation) = 1""")


def _spikes(ctx: Context) -> None:
    sigma = ctx.spike_sigma
    for _, layout in ctx.layouts("steps"):
        if not _tensor_columns(ctx, layout, ("action",)):
            continue
        # pass 1: count, mean and sum of squared deviations per element (Chan et al.'s merge)
        stats: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for batch in ctx.batches("steps", layout, ["action"]):
            for name, values, valid in _float_leaves("action", batch.column("action")):
                x = values.reshape(len(values), -1)[valid].astype(np.float64)
                ok = np.isfinite(x)
                n_b = ok.sum(axis=0).astype(np.float64)
                xs = np.where(ok, x, 0.0)
                mean_b = np.divide(xs.sum(axis=0), n_b, out=np.zeros_like(n_b), where=n_b > 0)
                m2_b = np.where(ok, (xs - mean_b) ** 2, 0.0).sum(axis=0)
                if name not in stats:
                    stats[name] = (n_b, mean_b, m2_b)
                    continue
                n_a, mean_a, m2_a = stats[name]
                n = n_a + n_b
                delta = mean_b - mean_a
                frac = np.divide(n_b, n, out=np.zeros_like(n), where=n > 0)
                stats[name] = (n, mean_a + delta * frac, m2_a + m2_b + delta ** 2 * n_a * frac)
        if not stats:
            continue
        std = {name: np.sqrt(np.divide(m2, n, out=np.zeros_like(n), where=n > 0))
               for name, (n, _, m2) in stats.items()}
        # pass 2: the rows with an element beyond sigma std
        for batch in ctx.batches("steps", layout, ["run_id", "episode_id", "step", "action"]):
            for name, values, valid in _float_leaves("action", batch.column("action")):
                _, mean, _ = stats[name]
                s = std[name]
                x = values.reshape(len(values), -1).astype(np.float64)
                with np.errstate(invalid="ignore", divide="ignore"):
                    z = np.where(s > 0, np.abs(x - mean) / np.where(s > 0, s, 1.0), 0.0)
                z = np.where(np.isfinite(z), z, 0.0)
                bad = np.flatnonzero((z > sigma).any(axis=1) & valid)
                if not len(bad):
                    continue
                room = max(ctx.tally.room(ctx.check), 0)
                ctx.tally.count(ctx.check, "warning", max(len(bad) - room, 0))
                bad = bad[:room]
                for row, (run_id, episode_id, step) in zip(bad.tolist(), _keys(batch, bad), strict=True):
                    e = int(np.argmax(z[row]))
                    ctx.emit("warning", "steps", run_id, episode_id, step,
                             f"{name}{_element(values.shape[1:], e)} = {x[row, e]:.6g} is "
                             f"{z[row, e]:.3g} std from its mean {mean[e]:.6g} "
                             f"(std {s[e]:.3g}; spike_sigma={sigma:g})")


#: The checks of this module, in the order :data:`~rlarrow.query.doctor.CHECKS` lists them.
TENSOR_CHECKS: tuple[Check, ...] = (
    Check("nonfinite", _nonfinite, ("steps",),
          "NaN or infinity in rewards, discounts, observations and actions"),
    Check("frozen", _frozen, ("steps",), "one observation repeated for more than frozen_steps steps"),
    Check("spikes", _spikes, ("steps",), "float action elements more than spike_sigma std from their mean"),
)
