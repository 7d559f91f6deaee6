"""A replay memory with skrl's API whose exports keep what skrl's lose.

:class:`Memory` keeps named torch tensors ``(memory_size, num_envs, *size)`` in circular
buffers on the requested device, with the API of skrl's ``Memory`` (so agents written
for it run unchanged); :class:`RandomMemory` adds uniform sampling. Exports write the
same ``pt``/``npz``/``csv`` files skrl writes, and also ``parquet``: one rlarrow
``memory`` file that records the write pointer, the fill flag and the env index of every
row, so time order survives a wrap (see :func:`rlarrow.io.memory.unroll.memory_to_episodes`).

Example:
    >>> import torch
    >>> memory = RandomMemory(memory_size=4, num_envs=2, device="cpu")
    >>> memory.create_tensor("states", 3)
    True
    >>> memory.create_tensor("terminated", 1, dtype=torch.bool)
    True
    >>> for t in range(5):  # the fifth step wraps the buffer
    ...     memory.add_samples(states=torch.full((2, 3), float(t)),
    ...                        terminated=torch.tensor([[False], [t == 4]]))
    >>> len(memory), memory.filled, memory.memory_index
    (8, True, 1)
    >>> [batch] = memory.sample(["states", "terminated"], batch_size=5)
    >>> batch[0].shape, batch[1].dtype
    (torch.Size([5, 3]), torch.bool)
"""

from __future__ import annotations

import datetime
import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlarrow.core import exits
from rlarrow.core import schema as _schema
from rlarrow.core.deps import require
from rlarrow.core.errors import ArgumentError, ArgumentTypeError, AssumptionWarning, RLArrowWarning
from rlarrow.io.memory.snapshot import MemorySnapshot

__all__ = ["Memory", "RandomMemory"]

#: What :meth:`Memory.save` writes: skrl's three formats, and Parquet.
EXPORT_FORMATS = ("pt", "npz", "csv", "parquet")


def _torch() -> Any:
    return require("torch", feature="rlarrow.record.replay")


def _flat_size(size: Any) -> int:
    """Elements per sample of ``size``: an int, a shape, or a space with ``.shape`` or ``.n``."""
    if isinstance(size, (int, np.integer)):
        return int(size)
    if isinstance(size, Sequence):
        return int(math.prod(int(x) for x in size))
    shape = getattr(size, "shape", None)
    if shape is not None:
        return int(math.prod(shape)) if len(shape) else 1  # Discrete spaces have shape ()
    raise ArgumentTypeError(f"size must be an int, a sequence of ints or a space with a shape, got {size!r}")


class Memory:
    """Circular buffers of named tensors ``(memory_size, num_envs, *size)`` (skrl's API).

    Args:
        memory_size: rows per environment (first dimension).
        num_envs: parallel environments (second dimension).
        device: where the tensors live (default: ``cuda:0`` when available, else cpu).
        export: save the memory each time it fills, before it starts overwriting.
        export_format: ``"pt"``, ``"npz"``, ``"csv"`` (as skrl writes them) or ``"parquet"``
            (keeps the write pointer, fill flag and env indices).
        export_directory: where exports go (``<directory>/memories/``).

    Raises:
        ValueError: an unknown export format.
        MissingDependencyError: torch is not installed.
    """

    def __init__(
        self,
        memory_size: int,
        num_envs: int = 1,
        device: Any = None,
        export: bool = False,
        export_format: str = "pt",
        export_directory: str | os.PathLike[str] = "",
    ) -> None:
        torch = _torch()
        if export_format not in EXPORT_FORMATS:
            raise ArgumentError(f"export_format={export_format!r} is not supported; choose one of "
                                f"{', '.join(EXPORT_FORMATS)}")
        if memory_size < 1 or num_envs < 1:
            raise ArgumentError(f"memory_size and num_envs must be positive, got {memory_size}, {num_envs}")
        self.memory_size = int(memory_size)
        self.num_envs = int(num_envs)
        if device is None:
            device = "cuda:0" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.filled = False
        self.env_index = 0
        self.memory_index = 0
        self.tensors: dict[str, Any] = {}
        self.tensors_view: dict[str, Any] = {}
        self.sampling_indexes: Any = None
        self.all_sequence_indexes = np.arange(self.memory_size * self.num_envs).reshape(
            self.memory_size, self.num_envs).T.ravel()
        self.export = export
        self.export_format = export_format
        self.export_directory = os.fspath(export_directory)
        self._unexported = False  # rows added since the last export (then exported at exit)

    def __len__(self) -> int:
        """Valid rows: ``memory_size * num_envs`` once full, else up to the write pointer."""
        if self.filled:
            return self.memory_size * self.num_envs
        return self.memory_index * self.num_envs + self.env_index

    def __repr__(self) -> str:
        names = ", ".join(f"{n}: {t.dtype}{list(t.shape[2:])}" for n, t in self.tensors.items())
        return (f"{type(self).__name__}(memory_size={self.memory_size}, num_envs={self.num_envs}, "
                f"len={len(self)}, device={self.device}, {names})")

    # ------------------------------------------------------------------ tensors

    def share_memory(self) -> None:
        """Move the (cpu) tensors to shared memory, for use across processes."""
        for tensor in self.tensors.values():
            if not tensor.is_cuda:
                tensor.share_memory_()

    def get_tensor_names(self) -> list[str]:
        """The tensors' names, sorted."""
        return sorted(self.tensors)

    def get_tensor_by_name(self, name: str, keepdim: bool = True) -> Any:
        """The tensor ``name``, ``(memory_size, num_envs, *size)``.

        With ``keepdim=False``, a ``(memory_size * num_envs, *size)`` view of it.

        Raises:
            KeyError: no such tensor.
        """
        return self.tensors[name] if keepdim else self.tensors_view[name]

    def set_tensor_by_name(self, name: str, tensor: Any) -> None:
        """Copy ``tensor`` into the tensor ``name`` (same shape, or broadcastable)."""
        torch = _torch()
        with torch.no_grad():
            self.tensors[name].copy_(torch.as_tensor(tensor))

    def create_tensor(self, name: str, size: Any, dtype: Any = None, keep_dimensions: bool = False) -> bool:
        """Create the tensor ``name``, ``(memory_size, num_envs, size)``; floats start as NaN.

        Args:
            name: the tensor's name.
            size: elements per sample: an int, a shape (flattened unless
                ``keep_dimensions``), or a gymnasium space; None creates nothing.
            dtype: a torch dtype (default: torch's default float dtype).
            keep_dimensions: keep ``size``'s shape instead of flattening it.

        Returns:
            True if created, False if it existed already (with the same size and dtype).

        Raises:
            ValueError: it exists with another size or dtype, or ``keep_dimensions`` without
                a shape.
        """
        torch = _torch()
        if size is None:
            return False
        if keep_dimensions:
            if not isinstance(size, Sequence):
                raise ArgumentError("keep_dimensions=True needs size as a sequence of ints (a shape)")
            shape_tail = tuple(int(x) for x in size)
        else:
            shape_tail = (_flat_size(size),)
        if name in self.tensors:
            existing = self.tensors[name]
            if tuple(existing.shape[2:]) != shape_tail:
                raise ArgumentError(f"tensor {name!r} exists with size {tuple(existing.shape[2:])}, "
                                    f"not {shape_tail}")
            if dtype is not None and existing.dtype != dtype:
                raise ArgumentError(f"tensor {name!r} exists with dtype {existing.dtype}, not {dtype}")
            return False
        if name in _schema.table("memory").column_names:
            raise ArgumentError(f"{name!r} is a column of the memory table; choose another tensor name")
        tensor = torch.zeros((self.memory_size, self.num_envs, *shape_tail), device=self.device, dtype=dtype)
        if torch.is_floating_point(tensor):
            tensor.fill_(float("nan"))
        self.tensors[name] = tensor
        self.tensors_view[name] = tensor.view(-1, *shape_tail)
        setattr(self, f"_tensor_{name}", tensor)
        return True

    def reset(self) -> None:
        """Forget what was added (pointers back to 0, not full); the data stays until overwritten."""
        self.filled = False
        self.env_index = 0
        self.memory_index = 0

    # ------------------------------------------------------------------ writing

    def add_samples(self, **tensors: Any) -> None:
        """Store one step's samples, ``(envs, *size)`` per tensor (names not created are skipped).

        * ``envs == num_envs``: one row for every env; the memory index moves by one.
        * ``envs < num_envs``: the next ``envs`` envs of the current row; the env index moves.
        * ``num_envs == 1`` and ``envs > 1``: ``envs`` consecutive rows (wrapping around).
        * one dimension: one sample of the next env.

        When the buffer fills, it is exported (if ``export``) and starts over.

        Raises:
            ValueError: no samples, or a shape that fits none of the cases above.
        """
        torch = _torch()
        if not tensors:
            raise ArgumentError("no samples; give them as keyword arguments named after the tensors")
        items = [(n, torch.as_tensor(t, device=self.device)) for n, t in tensors.items()
                 if n in self.tensors and t is not None]
        if not items:
            raise ArgumentError(f"none of {sorted(tensors)} is a tensor of this memory; create them first "
                                f"(it has {self.get_tensor_names()})")
        name0, first = items[0]
        self._added()
        sample_dims = self.tensors[name0].ndim - 2
        if first.ndim == sample_dims:  # one sample, for the next env
            for name, t in items:
                self.tensors[name][self.memory_index, self.env_index].copy_(t)
            self.env_index += 1
        elif first.ndim == sample_dims + 1 and first.shape[0] == self.num_envs:
            for name, t in items:
                self.tensors[name][self.memory_index].copy_(t)
            self.memory_index += 1
        elif first.ndim == sample_dims + 1 and first.shape[0] < self.num_envs:
            rows = first.shape[0]
            if self.env_index + rows > self.num_envs:
                raise ArgumentError(f"{rows} samples from env {self.env_index} overflow "
                                    f"num_envs={self.num_envs}")
            for name, t in items:
                self.tensors[name][self.memory_index, self.env_index:self.env_index + rows].copy_(t)
            self.env_index += rows
        elif first.ndim == sample_dims + 1 and self.num_envs == 1:
            self._add_rows(items, first.shape[0])
            return
        else:
            raise ArgumentError(f"{name0!r}: expected samples shaped (envs, *size) with envs <= "
                                f"{self.num_envs} (or one sample shaped size), got {tuple(first.shape)}")
        if self.env_index >= self.num_envs:
            self.env_index = 0
            self.memory_index += 1
        if self.memory_index >= self.memory_size:
            self.memory_index = 0
            self._on_fill()

    def _add_rows(self, items: list[tuple[str, Any]], rows: int) -> None:
        """One env, many samples: consecutive rows, exporting when full before wrapping."""
        if rows > self.memory_size:
            raise ArgumentError(f"{rows} samples do not fit a memory of {self.memory_size} rows")
        head = min(rows, self.memory_size - self.memory_index)
        for name, t in items:
            self.tensors[name][self.memory_index:self.memory_index + head].copy_(t[:head].unsqueeze(1))
        self.memory_index += head
        if self.memory_index >= self.memory_size:
            self.memory_index = 0
            self._on_fill()  # exported before the rest overwrites the oldest rows
        if rows > head:
            for name, t in items:
                self.tensors[name][:rows - head].copy_(t[head:].unsqueeze(1))
            self.memory_index = rows - head
            self._added()

    def _added(self) -> None:
        """Rows were added: with parquet exports, they are exported at exit unless an export comes first."""
        if not self._unexported:
            self._unexported = True
            if self.export and self.export_format == "parquet":
                # weakly: a memory dropped before the exit (a main() that returned, an agent per trial
                # of a sweep) is freed, exporting its last rows as it goes (__del__)
                exits.track(self, self.close, weak=True)

    def __del__(self) -> None:
        if getattr(self, "_unexported", False) and self.export and self.export_format == "parquet":
            try:
                self.close()
            except Exception as exc:  # noqa: BLE001 - a finalizer cannot raise: say what was lost
                warnings.warn(f"{type(self).__name__} dropped: exporting its last rows to "
                              f"{self.export_directory} failed ({exc})", RLArrowWarning, stacklevel=1)

    def _on_fill(self) -> None:
        self.filled = True
        if self.export:
            self.save(self.export_directory, self.export_format)
            self._unexported = False
            exits.untrack(self)  # (tracked again by the next rows added)

    def close(self) -> None:
        """Export the rows added since the last export (``export_format="parquet"`` only).

        skrl exports a memory only when it fills, so the rows of a run's last, unfilled
        cycle are never written. A parquet export records the write pointer, so a reader
        knows which of its rows are new (:mod:`rlarrow.io.memory.unroll`); this method
        writes one for them. It runs by itself when the interpreter exits or the process
        is stopped with SIGTERM (:mod:`rlarrow.core.exits`); calling it again is harmless.
        The legacy formats are left as skrl leaves them: their files cannot say which rows
        are new. A memory dropped before the exit (a ``main()`` that returned) exports them
        as it is freed.

        Returns:
            None.
        """
        exits.untrack(self)
        if self.export and self.export_format == "parquet" and self._unexported and len(self):
            self.save(self.export_directory, self.export_format)
            self._unexported = False

    # ------------------------------------------------------------------ reading

    def sample(self, names: Sequence[str], batch_size: int, mini_batches: int = 1,
               sequence_length: int = 1) -> list[list[Any]]:
        """Sample ``batch_size`` rows (implemented by subclasses such as :class:`RandomMemory`)."""
        raise NotImplementedError(f"{type(self).__name__} does not sample; use RandomMemory")

    def sample_by_index(self, names: Sequence[str], indexes: Any, mini_batches: int = 1) -> list[list[Any]]:
        """The rows ``indexes`` (of the ``(memory_size * num_envs, *size)`` view) of each tensor.

        Returns:
            One list per mini-batch, holding a tensor per name (None for unknown names).
        """
        if mini_batches > 1:
            return [[self.tensors_view[n][batch] if n in self.tensors else None for n in names]
                    for batch in np.array_split(np.asarray(indexes), mini_batches)]
        return [[self.tensors_view[n][indexes] if n in self.tensors else None for n in names]]

    def sample_all(self, names: Sequence[str], mini_batches: int = 1,
                   sequence_length: int = 1) -> list[list[Any]]:
        """All rows of each tensor.

        Views in storage order, or env by env when ``sequence_length > 1`` (each env's
        rows consecutive).
        """
        if sequence_length > 1:
            return self.sample_by_index(names, self.all_sequence_indexes, mini_batches)
        if mini_batches > 1:
            size = (self.memory_size * self.num_envs) // mini_batches
            return [[self.tensors_view[n][size * i:size * (i + 1)] if n in self.tensors else None
                     for n in names] for i in range(mini_batches)]
        return [[self.tensors_view[n] if n in self.tensors else None for n in names]]

    def get_sampling_indexes(self) -> Any:
        """The indexes the last :meth:`sample` used."""
        return self.sampling_indexes

    # ------------------------------------------------------------------ files

    def snapshot(self, name: str = "") -> MemorySnapshot:
        """The memory's tensors (copied to the cpu) and its pointers, as a snapshot."""
        tensors = {n: self.tensors[n].detach().cpu().numpy() for n in self.get_tensor_names()}
        return MemorySnapshot(tensors, name=name or self._file_stem(), source_format="memory",
                              is_full=self.filled, write_pointer=self.memory_index,
                              env_pointer=self.env_index)

    def _file_stem(self) -> str:
        stamp = datetime.datetime.now().strftime("%y-%m-%d_%H-%M-%S-%f")
        return f"{stamp}_memory_{hex(id(self))}"

    def save(self, directory: str | os.PathLike[str] = "", format: str = "pt") -> Path:  # noqa: A002
        """Write the memory to ``<directory>/memories/<time>_memory_<id>.<format>``.

        ``pt``, ``npz`` and ``csv`` are laid out as skrl writes them (csv: the valid rows
        only); ``parquet`` also keeps the write pointer, the fill flag and env indices.

        Returns:
            The file written.
        """
        from rlarrow.io.memory.importer import write_memory

        if format not in EXPORT_FORMATS:
            raise ArgumentError(f"unsupported format {format!r}; choose one of {', '.join(EXPORT_FORMATS)}")
        directory = os.fspath(directory) or self.export_directory
        snap = self.snapshot()
        return write_memory(snap, Path(directory) / "memories" / f"{snap.name}.{format}", format)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Load a memory export (pt, npz, csv or parquet) into this memory.

        Tensors are created as needed and must otherwise match in shape. A parquet export
        restores the pointers and fill flag; the legacy formats do not record them, so the
        memory is then taken as full (said with an :class:`~rlarrow.AssumptionWarning`).
        """
        from rlarrow.io.memory.importer import read_memory

        torch = _torch()
        snap = read_memory(path, num_envs=self.num_envs, memory_size=self.memory_size)
        if (snap.memory_size, snap.num_envs) != (self.memory_size, self.num_envs):
            raise ArgumentError(f"{path}: holds memory_size={snap.memory_size}, num_envs={snap.num_envs}; "
                                f"this memory has {self.memory_size}, {self.num_envs}")
        for name, value in snap.tensors.items():
            tensor = torch.from_numpy(np.array(value))
            self.create_tensor(name, list(value.shape[2:]), dtype=tensor.dtype, keep_dimensions=True)
            self.set_tensor_by_name(name, tensor)
        if snap.is_full is None:
            warnings.warn(f"{path}: the export does not record the write pointer; taking the memory "
                          "as full (export as parquet to keep it)", AssumptionWarning, stacklevel=2)
            self.filled, self.memory_index, self.env_index = True, 0, 0
        else:
            self.filled = bool(snap.is_full)
            self.memory_index = int(snap.write_pointer or 0)
            self.env_index = int(snap.env_pointer or 0)


class RandomMemory(Memory):
    """A :class:`Memory` that samples rows uniformly at random.

    Args:
        replacement: sample with replacement (the batch size is always met); without
            it a batch holds at most ``len(memory)`` rows.
        memory_size, num_envs, device, export, export_format, export_directory: see :class:`Memory`.
    """

    def __init__(
        self,
        memory_size: int,
        num_envs: int = 1,
        device: Any = None,
        export: bool = False,
        export_format: str = "pt",
        export_directory: str | os.PathLike[str] = "",
        replacement: bool = True,
    ) -> None:
        super().__init__(memory_size, num_envs, device, export, export_format, export_directory)
        self._replacement = replacement

    def sample(self, names: Sequence[str], batch_size: int, mini_batches: int = 1,
               sequence_length: int = 1) -> list[list[Any]]:
        """Sample ``batch_size`` valid rows of each tensor in ``names``.

        With ``sequence_length > 1``, sequences of that many consecutive steps of one env.
        Only the sampled rows are gathered; the buffer is never copied whole.

        Returns:
            One list per mini-batch, holding a ``(batch_size * sequence_length, *size)``
            tensor per name.

        Raises:
            ValueError: the memory holds fewer valid rows than one sequence.
        """
        torch = _torch()
        size = len(self)
        offsets = None
        if sequence_length > 1:
            offsets = torch.arange(0, self.num_envs * sequence_length, self.num_envs)
            size -= int(offsets[-1])
        if size <= 0:
            short = f", fewer than a sequence of {sequence_length}" if offsets is not None else ""
            raise ArgumentError(f"cannot sample: the memory holds {len(self)} valid rows{short}")
        if self._replacement:
            indexes = torch.randint(0, size, (batch_size,))
        else:
            indexes = torch.randperm(size, dtype=torch.long)[:batch_size]
        if offsets is not None:
            indexes = (offsets.repeat(indexes.shape[0], 1) + indexes.view(-1, 1)).view(-1)
        self.sampling_indexes = indexes
        return self.sample_by_index(names, indexes.to(self.device), mini_batches)
