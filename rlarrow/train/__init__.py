"""Training layer: a store's rows, windows and transitions into training loops.

* :mod:`~rlarrow.train.samples`: the torch-free sample reader (rows, sequence windows,
  transitions) behind both loaders;
* :mod:`~rlarrow.train.source`, :mod:`~rlarrow.train.sampling`, :mod:`~rlarrow.train.transforms`:
  the parts a stream is composed of (which rows; their order, shards and resume point;
  windows, normalisation, device), each usable alone;
* :mod:`~rlarrow.train.torch`: :class:`~rlarrow.train.torch.StreamingDataset` for PyTorch
  (and :mod:`~rlarrow.train.table`'s map-style ``TableDataset``);
* :mod:`~rlarrow.train.ray`: Ray Data datasets over a store's files.

May import :mod:`rlarrow.core`, :mod:`rlarrow.io` and :mod:`rlarrow.query`; see
``docs/architecture.md``.
"""

from typing import Any

from rlarrow.core import submodule

__all__: list[str] = []


def __getattr__(name: str) -> Any:  # a submodule on first use: rlarrow.train.<module>
    return submodule(__name__, name)
