"""Training layer: a store's rows, windows and transitions into training loops.

* :mod:`~rlarrow.train.samples`: the torch-free sample reader (rows, sequence windows,
  transitions) behind both loaders;
* :mod:`~rlarrow.train.torch`: :class:`~rlarrow.train.torch.StreamingDataset` for PyTorch;
* :mod:`~rlarrow.train.ray`: Ray Data datasets over a store's files.

May import :mod:`rlarrow.core`, :mod:`rlarrow.io` and :mod:`rlarrow.query`; see
``docs/architecture.md``.
"""

__all__: list[str] = []
