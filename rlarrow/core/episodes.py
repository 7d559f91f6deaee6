"""Episode buffers and their commits, shared by the recorders (dm_env and gymnasium).

A recorder appends each step's values to its environment's :class:`Lane` (its hot path):
one list per column for all the lane's episodes, one after another, so that a commit
slices each list once whatever the number of episodes in it. A :class:`Sink` turns the
rows that are complete into one ``steps`` table per commit (RLDS alignment), with the
ended episodes' ``episodes`` rows, through the one episode builder
(:mod:`rlarrow.core.episode_builder`: the steps' flags, the rows' outcome).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from rlarrow.core import exits
from rlarrow.core import schema as _schema
from rlarrow.core.episode_builder import outcome, step_flags
from rlarrow.core.errors import ArgumentError
from rlarrow.core.sources import EpisodeRows
from rlarrow.core.step_columns import actions as _actions
from rlarrow.core.step_columns import ordered as _ordered
from rlarrow.core.step_columns import scalars as _scalars
from rlarrow.core.step_columns import stack as _stack
from rlarrow.core.store import Store

__all__ = ["EpisodeRows"]

#: an arena holds at most this many bytes before it grows past the flush size
_ARENA_BYTES = 256 << 20
#: observations of at most this many bytes are kept as ``bytes`` (see :class:`Lane`), larger
#: ones in an :class:`Arena`: ``tobytes`` and a join at commit copy a 200-byte board in a
#: third of the time an arena's row assignment takes, a 7 KB frame in twice the time
PACKED_BYTES = 512


def checked_row(value: Any, shape: tuple[int, ...], dtype: Any, where: str) -> np.ndarray:
    """``value`` as an array of the spec's shape and dtype (a cast, as assignment makes one).

    Raises:
        ValueError: another shape, naming ``where`` (the environment) and both shapes.
    """
    arr = np.asarray(value, dtype=dtype)
    if arr.shape != shape:  # assigning would broadcast it silently
        raise ArgumentError(f"{where} returned an observation of shape {arr.shape}; its "
                            f"observation spec says {shape}. Fix the environment or its spec")
    return arr


class Packer:
    """Packs one nested observation (dicts, tuples or lists of fixed-shape arrays) into bytes.

    A recorder of dict observations appends each step's packed bytes to its lane (one
    ``tobytes`` per leaf and one join, where copying the nested value leaf by leaf and
    stacking the leaves at commit took 11 us a step for 3 keys); a commit reads the joined
    bytes as one array of :attr:`dtype`, a NumPy structured dtype that mirrors the nesting,
    and :func:`unpack` gives back each leaf as a column. Leaves of another dtype are cast
    (as ``np.array(value, dtype)`` would), of another shape refused.

    Args:
        leaves: ``(path, shape, dtype)`` per leaf, ``path`` the keys (str) or indexes (int)
            down to it, in the order the struct keeps them.
        where: what to name in errors (the environment).

    Example:
        >>> p = Packer([(("pos",), (2,), np.float32), (("hit",), (), np.bool_)])
        >>> rows = np.frombuffer(p({"pos": np.ones(2, np.float32), "hit": True}) * 2, p.dtype)
        >>> unpack(rows)["pos"].shape
        (2, 2)
    """

    __slots__ = ("dtype", "fast", "flat", "leaves", "where")

    def __init__(self, leaves: list[tuple[tuple[Any, ...], tuple[int, ...], Any]],
                 where: str = "the environment") -> None:
        self.leaves = [(tuple(path), tuple(shape), np.dtype(dtype)) for path, shape, dtype in leaves]
        self.flat = [(path[0], shape, dtype) for path, shape, dtype in self.leaves] \
            if all(len(path) == 1 for path, _, _ in self.leaves) else None
        self.where = where
        #: ``self(value)`` for a flat dict (what a recorder calls each step), or None
        self.fast = _unrolled(self) if self.flat else None
        fields: dict[str, Any] = {}
        for path, shape, dtype in self.leaves:
            node = fields
            for key in path[:-1]:
                node = node.setdefault(str(key), {})
            node[str(path[-1])] = (dtype, shape)
        self.dtype = _struct(fields)
        if _paths(self.dtype) != [tuple(str(k) for k in path) for path, _, _ in self.leaves]:
            raise ArgumentError("a Packer's leaves must come in their struct's order, each dict's "
                                "leaves together, with no key '' (Packer.of gives them so)")

    @classmethod
    def of(cls, spec: Any, where: str = "the environment") -> Packer | None:
        """The packer for a dict/tuple/list spec of fixed-shape numeric arrays, else None.

        ``spec`` holds dm_env specs or gymnasium spaces. None for a plain array (it has
        paths of its own) or a leaf of no fixed shape or numeric dtype.
        """
        leaves: list[tuple[tuple[Any, ...], tuple[int, ...], Any]] = []

        def walk(node: Any, path: tuple[Any, ...]) -> bool:
            children = getattr(node, "spaces", node)  # a gymnasium Dict or Tuple space
            if hasattr(children, "items"):
                return bool(children) and all(walk(v, (*path, k)) for k, v in children.items())
            if isinstance(children, (list, tuple)) and path is not None:
                return bool(children) and all(walk(v, (*path, i)) for i, v in enumerate(children))
            shape, dtype = getattr(node, "shape", None), getattr(node, "dtype", None)
            if not path or shape is None or dtype is None or np.dtype(dtype).kind not in "biuf":
                return False
            leaves.append((path, tuple(shape), np.dtype(dtype)))
            return True

        if not walk(spec, ()):
            return None
        if len({tuple(str(k) for k in path) for path, _, _ in leaves}) != len(leaves) or \
                any(str(k) == "" for path, _, _ in leaves for k in path):
            # keys equal as strings ({1: ..., "1": ...}), or "" (NumPy names that field f0):
            # the leaf-by-leaf path takes them
            return None
        return cls(leaves, where)

    def __reduce__(self) -> tuple[Any, ...]:
        # (made again from its leaves: ``fast`` is a function of its own, which pickle cannot
        # name, and a copy's must call the copy's ``slow``)
        return type(self), (self.leaves, self.where)

    def __call__(self, value: Any) -> bytes:
        """One observation's leaves' bytes, joined (a copy: envs may reuse their buffers)."""
        if self.fast is not None:
            return self.fast(value)  # type: ignore[no-any-return]
        return self.slow(value)

    def slow(self, value: Any) -> bytes:
        """:meth:`__call__` leaf by leaf, each checked (and cast) apart, naming what is wrong."""
        parts = []
        for path, shape, dtype in self.leaves:
            v = value
            for depth, key in enumerate(path):
                try:
                    v = v[key]
                except (KeyError, IndexError, TypeError):
                    at = "".join(f"[{k!r}]" for k in path[:depth])
                    raise ArgumentError(f"{self.where} returned an observation{at} without {key!r}; "
                                        "its observation spec has it. Fix the environment or its "
                                        "spec") from None
            parts.append(self._leaf(v, path, shape, dtype))
        return b"".join(parts)

    def _leaf(self, value: Any, path: tuple[Any, ...], shape: tuple[int, ...], dtype: Any) -> bytes:
        name = "".join(f"[{k!r}]" for k in path)
        return checked_row(value, shape, dtype, f"{self.where} (observation{name})").tobytes()


def _unrolled(packer: Packer) -> Any:
    """``packer``'s call for a flat dict, written out leaf by leaf (a function made once).

    Each leaf of the spec's dtype and shape is copied as bytes (``tobytes``); another is
    checked and cast by :meth:`Packer.slow`'s rules; a missing key goes the slow way, which
    names it. Written out, the three checks per leaf cost 0.67 us a step against 0.95 for
    the same checks in a loop over the leaves (a comprehension, tuple unpacking, global
    lookups), with 3 leaves. The keys, shapes and dtypes are the function's globals,
    never part of its source.
    """
    assert packer.flat is not None
    names: dict[str, Any] = {"nd": np.ndarray, "leaf": packer._leaf, "slow": packer.slow}
    takes, parts = [], []
    for i, (key, shape, dtype) in enumerate(packer.flat):
        names[f"k{i}"], names[f"p{i}"], names[f"s{i}"], names[f"d{i}"] = key, (key,), shape, dtype
        takes.append(f"        a{i} = value[k{i}]")
        parts.append(f"a{i}.tobytes() if type(a{i}) is nd and a{i}.dtype is d{i} and a{i}.shape == s{i} "
                     f"else leaf(a{i}, p{i}, s{i}, d{i})")
    source = "\n".join([
        "def pack(value):",
        "    try:",
        *takes,
        "    except (KeyError, IndexError, TypeError):",
        "        return slow(value)  # (names what is missing)",
        f"    return b''.join(({', '.join(parts)},))",
    ])
    exec(compile(source, f"<rlarrow Packer of {len(packer.flat)} leaves>", "exec"), names)  # noqa: S102
    return names["pack"]


def _struct(fields: dict[str, Any]) -> np.dtype[Any]:
    return np.dtype([(name, _struct(f)) if isinstance(f, dict) else (name, f[0], f[1])
                     for name, f in fields.items()])


def _paths(dtype: np.dtype[Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The leaf paths of a structured dtype, in its byte order."""
    out: list[tuple[str, ...]] = []
    for name in dtype.names or ():
        sub = dtype.fields[name][0]  # type: ignore[index]
        out += _paths(sub, (*prefix, name)) if sub.names else [(*prefix, name)]
    return out


def unpack(rows: np.ndarray) -> Any:
    """The rows of a :class:`Packer`'s structured dtype as nested dicts of contiguous columns."""
    names = rows.dtype.names
    if names is None:
        return np.ascontiguousarray(rows)
    return {name: unpack(rows[name]) for name in names}


class Arena:
    """Preallocated rows for one plain (non-nested) observation array, of one lane.

    A recorder copies each step's observation into the next free row (no allocation per
    step): the lane's row t is the arena's row t, so a commit takes its first rows as one
    view and nothing is stacked. After a commit the rows still needed (the newest one of
    an open episode) move to the front.

    Args:
        shape, dtype: one observation's shape and dtype (the spec's).
        rows: rows to allocate at first (more are added when needed).
        where: what to name in errors (the environment).
    """

    __slots__ = ("buf", "n", "retired", "rows", "shape", "where")

    def __init__(self, shape: tuple[int, ...], dtype: Any, rows: int, where: str = "the environment") -> None:
        self.retired: np.ndarray | None = None  # the buffer a commit in flight reads (restart)
        self.shape = tuple(shape)
        self.where = where
        row_bytes = max(1, int(np.prod(self.shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
        self.buf = np.empty((max(2, min(rows, _ARENA_BYTES // row_bytes)), *self.shape), dtype)
        self.rows = len(self.buf)  # allocated
        self.n = 0  # used

    def put(self, value: Any) -> None:
        """Copy one observation into the next row."""
        i = self.n
        if i == self.rows:
            grown = np.empty((2 * i, *self.shape), self.buf.dtype)
            grown[:i] = self.buf
            self.buf, self.rows = grown, 2 * i
        if type(value) is not np.ndarray or value.shape != self.shape:
            value = checked_row(value, self.shape, self.buf.dtype, self.where)
        self.buf[i] = value
        self.n = i + 1

    def restart(self, taken: int, *, reuse: bool) -> None:
        """Drop the first ``taken`` rows; the rest move to the front (of a new buffer unless ``reuse``).

        ``reuse`` only when nothing refers to the taken rows any more (their commit is done).
        Without it the buffer is kept as :attr:`retired` and taken again at the restart
        after next, when the caller has waited for the commit that read it (a writer
        thread's): two buffers in turn, where a fresh one each commit cost its page faults
        on the recording thread.
        """
        left = self.n - taken
        if reuse:
            buf = self.buf
        else:
            spare, self.retired = self.retired, self.buf
            buf = spare if spare is not None and spare.shape == self.buf.shape else np.empty_like(self.buf)
        if left:
            buf[:left] = self.buf[taken:self.n]  # NumPy copies through a buffer where they overlap
        self.buf, self.n = buf, left


class Episode:
    """One episode's place in its lane and what its ``episodes`` row needs."""

    __slots__ = (
        "ended",
        "env_index",
        "episode_id",
        "finished",
        "first",
        "first_discount",
        "first_reward",
        "meta",
        "ret",
        "start",
        "terminated",
    )

    def __init__(self, episode_id: int, env_index: int = 0) -> None:
        self.episode_id = episode_id
        self.env_index = env_index
        self.first = 0  # the lane's row holding its first uncommitted step
        self.start = 0  # that step's index in the episode (the rows before it are committed)
        self.ret = 0.0
        self.meta: Any = None
        self.finished = False  # no rows will follow: ended, or cut (a reset or close before its end)
        self.ended = False  # by the environment (LAST, terminated or truncated)
        self.terminated = False
        self.first_reward: Any = None
        self.first_discount: Any = None


class Lane:
    """One environment's rows not yet committed, its episodes one after another.

    Row t holds observation t with the action taken on it and the reward and discount that
    followed (RLDS). ``action``, ``reward`` and ``discount`` lack only the newest row of an
    open episode (its action is not known yet); a finished episode's last row has None in
    them. ``custom`` (step metadata) is either empty or has every row. With an
    :class:`Arena`, observations are its rows and ``obs`` stays empty; with ``packed``
    (``(shape, dtype)``), ``obs`` holds each observation's bytes (C order), joined into one
    array at commit (``shape`` is ``()`` and ``dtype`` structured for a :class:`Packer`'s;
    a vector recorder's lanes all packed alike, their bytes joined one lane after another).
    A lane with an arena is its sink's only one.
    """

    __slots__ = ("action", "arena", "custom", "discount", "env_index", "episodes", "obs", "packed", "reward")

    def __init__(self, env_index: int = 0) -> None:
        self.env_index = env_index
        self.obs: list[Any] = []
        self.action: list[Any] = []
        self.reward: list[Any] = []
        self.discount: list[Any] = []
        self.custom: list[Any] = []
        self.episodes: list[Episode] = []  # those with uncommitted rows (or open), in order
        self.arena: Arena | None = None
        self.packed: tuple[tuple[int, ...], np.dtype[Any]] | None = None

    @property
    def rows(self) -> int:
        """Steps held so far."""
        return self.arena.n if self.arena is not None else len(self.obs)

    @property
    def current(self) -> Episode | None:
        """The episode being recorded (None when there is none, or it finished)."""
        ep = self.episodes[-1] if self.episodes else None
        return ep if ep is not None and not ep.finished else None

    def begin(self, ep: Episode, first: int | None = None) -> None:
        """Start ``ep`` at lane row ``first`` (default: the newest, its first observation's).

        An unfinished episode before it is cut (``partial_end``). The caller adds the first
        row's observation before, and its step metadata (if the lane keeps any) after.
        """
        if self.current is not None:
            self.cut()
        ep.first = self.rows - 1 if first is None else first
        self.episodes.append(ep)

    def end(self, terminated: bool) -> None:
        """The environment ended the current episode (after its last row was added)."""
        ep = self.episodes[-1]
        ep.ended, ep.terminated = True, terminated
        self.cut()

    def cut(self) -> None:
        """Finish the current episode: its newest row gets no action, reward or discount."""
        self.episodes[-1].finished = True
        self.action.append(None)
        self.reward.append(None)
        self.discount.append(None)

    def settle(self) -> None:
        """Make the columns agree again after a step was interrupted half-way.

        A ``KeyboardInterrupt`` or a stop signal (:mod:`rlarrow.core.exits`) can land
        between a step's appends. A half-added row is dropped; a half-done :meth:`cut`
        (the episode ended) is completed. What is left is what :meth:`Sink.flush` expects.
        """
        eps = self.episodes
        if not eps:
            return
        rows = self.rows
        columns = (self.action, self.reward, self.discount)
        if eps[-1].finished:  # every row has its action (None on the last): complete a cut
            for column in columns:
                column.extend([None] * (rows - len(column)))
        else:  # the newest row alone waits for its action
            m = min(len(c) for c in columns)
            for column in columns:
                del column[m:]
            keep = max(m + 1, eps[-1].first + 1)
            if rows > keep:
                if self.arena is not None:
                    self.arena.n = keep
                else:
                    del self.obs[keep:]
                rows = keep
        if self.custom:
            del self.custom[rows:]
            self.custom.extend([None] * (rows - len(self.custom)))


class _Rows:
    """The rows one commit takes from its lanes, column by column."""

    __slots__ = ("action", "discount", "episodes", "has_metadata", "metadata", "observation", "packed",
                 "pads", "reward", "rows")

    def __init__(self) -> None:
        self.rows = 0
        #: per episode: (episode_id, env_index, first step, rows, ended, terminal)
        self.episodes: list[tuple[int, int, int, int, bool, bool]] = []
        self.observation: Any = []  # a list (of bytes when ``packed``), or one array (from an arena)
        self.packed: tuple[tuple[int, ...], Any] | None = None  # (shape, dtype) of packed rows
        self.action: list[Any] = []
        self.reward: list[Any] = []
        self.discount: list[Any] = []
        self.metadata: list[Any] = []
        self.has_metadata = False
        self.pads: list[int] = []  # rows with no action (an episode's last)


class Sink:
    """Commits its lanes' complete rows to a store, under a flush policy.

    Args:
        store: the store; ``own_store``: close it on :meth:`close`.
        run_id: the run the rows belong to.
        action_dtype: the dtype of plain (non-nested) actions, None for nested ones.
        flush_every_steps, flush_every_seconds: see :class:`rlarrow.EnvLogger`.
        background: commit the automatic flushes in a writer thread (see
            :class:`rlarrow.EnvLogger`); None (kept for old callers) is False.
        num_envs: one :class:`Lane` per environment (``env_index``), in :attr:`lanes`.
        types: the store's ``observation`` and ``action`` column types (from
            :func:`rlarrow.core.step_columns.declare_steps`): dict values are committed in their
            struct field order.
        emit: instead of committing to ``store`` (then None), give each commit's tables to
            ``emit({"steps": ..., "episodes": ...})``: a reader that builds episodes
            (envlogger's) hands them on as chunks of an episode source.
    """

    def __init__(
        self,
        store: Store | None,
        run_id: str,
        *,
        own_store: bool,
        action_dtype: Any,
        flush_every_steps: int | None,
        flush_every_seconds: float | None,
        background: bool | None,
        num_envs: int = 1,
        types: dict[str, Any] | None = None,
        emit: Any = None,
    ) -> None:
        self.store = store
        self.emit = emit
        self.types = types or {}
        self.run_id = run_id
        self.own_store = own_store
        self.action_dtype = action_dtype
        self.flush_every_steps = flush_every_steps
        self.flush_every_seconds = flush_every_seconds
        self.lanes = [Lane(i) for i in range(num_envs)]
        self.next_episode = 0
        self.unflushed = 0
        self.last_flush = time.monotonic()
        self._pending: Any = None
        self._pool: Any = None
        self.background = bool(background) and store is not None  # (emit=: no store to commit to)
        if self.background:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="rlarrow-recorder")
        self._closed = False
        if emit is None:
            exits.track(self, self.close)  # committed at exit, or on SIGTERM, when never closed

    def new_episode(self, env_index: int = 0) -> Episode:
        """A new episode with the run's next episode id (for :meth:`Lane.begin`)."""
        ep = Episode(self.next_episode, env_index)
        self.next_episode += 1
        return ep

    def due(self) -> bool:
        """Whether the flush policy asks for a commit now."""
        return (self.flush_every_steps is not None and self.unflushed >= self.flush_every_steps) or (
            self.flush_every_seconds is not None
            and time.monotonic() - self.last_flush >= self.flush_every_seconds
        )

    @staticmethod
    def _take(lane: Lane, out: _Rows, ended: list[Episode]) -> int:
        """Move the lane's rows that are ready into ``out``; return how many.

        All of them when its last episode finished, else all but the newest, whose action
        is not known yet. Each episode's rewards taken are added to its return (in order,
        as ``sum`` does); the episodes finished are appended to ``ended``.
        """
        eps = lane.episodes
        if not eps:
            return 0
        rows = lane.rows
        k = rows if eps[-1].finished else rows - 1
        if k <= 0:
            return 0
        base, reward, env = out.rows, lane.reward, lane.env_index
        info = out.episodes
        last = len(eps) - 1
        for j, ep in enumerate(eps):
            lo = ep.first
            hi = eps[j + 1].first if j < last else k
            n = hi - lo
            if n <= 0:  # an open episode of one row: its newest
                continue
            rewards = reward[lo:hi - 1] if ep.finished else reward[lo:hi]  # a finished one's last is None
            try:
                ep.ret = sum(rewards, ep.ret)
            except TypeError:  # a None reward (not dm_env's contract, but kept as a null)
                ep.ret = sum((r for r in rewards if r is not None), ep.ret)
            info.append((ep.episode_id, env, ep.start, n, ep.ended, ep.ended and ep.terminated))
            ep.start += n
            if ep.finished:
                out.pads.append(base + hi - 1)
                ended.append(ep)
        open_ep = eps[-1]
        lane.episodes = [] if open_ep.finished else [open_ep]
        open_ep.first = 0
        out.action += lane.action[:k]
        out.reward += reward[:k]
        out.discount += lane.discount[:k]
        del lane.action[:k], lane.reward[:k], lane.discount[:k]
        if lane.custom:
            out.metadata += lane.custom[:k]
            out.has_metadata = True
            del lane.custom[:k]
        else:
            out.metadata += [None] * k
        if lane.arena is not None:
            out.observation = lane.arena.buf[:k]  # a view; the arena restarts after the commit
        elif lane.packed is not None:  # (read as one array at commit: see Sink._observations)
            out.packed = lane.packed
            out.observation += lane.obs[:k]
            del lane.obs[:k]
        else:
            out.observation += lane.obs[:k]
            del lane.obs[:k]
        out.rows = base + k
        return k

    def flush(self, *, final: bool = False, wait: bool = True) -> None:
        """Commit every complete row recorded so far (and the episodes that ended).

        With ``final``, also the newest row of an unfinished episode, which is cut (its
        ``episodes`` row is marked ``partial_end``): what :meth:`close` does. One commit
        per call. The automatic flushes (``flush_every_*``) pass ``wait=False``: with
        ``background`` the commit then runs in a writer thread while the environment
        steps on (one commit in flight at a time, in order).

        Raises:
            StoreError: an earlier background commit failed (nothing after it was committed).
        """
        rows = _Rows()
        ended: list[Episode] = []
        arenas = []
        for lane in self.lanes:
            if final:
                lane.settle()  # (close() may come from an exit that interrupted a step)
            if final and lane.current is not None:
                lane.cut()
            taken = self._take(lane, rows, ended)
            if lane.arena is not None:
                arenas.append((lane.arena, taken))
        ep_rows = self._episode_rows(ended) if ended else None
        self.unflushed = 0
        self.last_flush = time.monotonic()
        self._wait()  # one commit in flight at most: order kept, memory bounded
        if self._pool is not None and not wait:
            self._pending = self._pool.submit(self._commit, rows, ep_rows)
            for arena, taken in arenas:
                # the commit in flight reads the old rows; the one before it is done (waited for)
                arena.restart(taken, reuse=False)
        else:
            try:
                self._commit(rows, ep_rows)
            finally:
                for arena, taken in arenas:
                    arena.restart(taken, reuse=True)

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()  # re-raises a failed background commit

    def _commit(self, rows: _Rows, ep_rows: dict[str, Any] | None) -> None:
        data: dict[str, Any] = {}
        if rows.rows:
            ids, envs, starts, lengths, ended, terminal = (
                np.array(c) for c in zip(*rows.episodes, strict=True))
            flags = step_flags(lengths, first_step=starts, is_last=ended, is_terminal=terminal)
            pads = np.zeros(rows.rows, bool)
            pads[rows.pads] = True
            table = _schema.build(
                "steps",
                {
                    "run_id": self.run_id,
                    "episode_id": ids.astype(np.int64)[flags["episode"]],
                    "step": flags["step"],
                    "env_index": envs.astype(np.int32)[flags["episode"]],
                    "observation": self._observations(rows.observation, rows.packed),
                    "action": _actions(rows.action, self.action_dtype, pads, self.types.get("action")),
                    "reward": _scalars(rows.reward),
                    "discount": _scalars(rows.discount),
                    "is_first": flags["is_first"],
                    "is_last": flags["is_last"],
                    "is_terminal": flags["is_terminal"],
                    "metadata": rows.metadata if rows.has_metadata else None,
                },
                num_rows=rows.rows,
                established=None if self.store is None else self.store.schema("steps"),
            )
            data["steps"] = table
        if ep_rows is not None:
            data["episodes"] = ep_rows
        if self.store is None:
            self.emit(data)
            return
        self.store.append_together(data)  # one commit: one manifest write for both tables

    def _observations(self, obs: Any, packed: tuple[tuple[int, ...], Any] | None = None) -> Any:
        """A commit's observations as a column: an arena's or packed rows, or stacked values."""
        if packed is not None:  # every lane's rows as bytes: one join, read as one array
            shape, dtype = packed
            obs = np.frombuffer(b"".join(obs), dtype).reshape(len(obs), *shape)
        if isinstance(obs, np.ndarray) and obs.dtype.names is None:
            return obs
        nested = unpack(obs) if isinstance(obs, np.ndarray) else _stack(obs)  # packed by a Packer, or not
        return _ordered(nested, self.types.get("observation"))

    def _episode_rows(self, eps: list[Episode]) -> dict[str, Any]:
        def meta(ep: Episode) -> Any:
            if ep.first_reward is None and ep.first_discount is None:
                return ep.meta
            return {"episode_fn": ep.meta, "first_reward": ep.first_reward,
                    "first_discount": ep.first_discount}

        return {
            "run_id": self.run_id,
            "partial_start": False,
            "episode_id": [ep.episode_id for ep in eps],
            "env_index": [ep.env_index for ep in eps],
            "num_steps": [ep.start for ep in eps],
            "return": [ep.ret for ep in eps],
            **outcome(ended=[ep.ended for ep in eps], terminated=[ep.terminated for ep in eps]),
            "metadata": [meta(ep) for ep in eps],
        }

    def close(self) -> None:
        """Commit everything (open episodes as ``partial_end``), stop the writer thread, close.

        Closing twice is harmless. A sink never closed is closed when the interpreter exits
        or the process is stopped (:mod:`rlarrow.core.exits`).
        """
        if self._closed:
            return
        self._closed = True
        if self.emit is None:
            exits.untrack(self)
        try:
            self.flush(final=True)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            if self.own_store and self.store is not None:
                self.store.close()
