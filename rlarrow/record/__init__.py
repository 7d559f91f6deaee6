"""Recording layer: what writes a run while it happens.

* :mod:`~rlarrow.record.dm_env`: :class:`~rlarrow.record.dm_env.EnvLogger`, a dm_env wrapper;
* :mod:`~rlarrow.record.gym`: gymnasium (vector) environment recorders;
* :mod:`~rlarrow.record.logger`: a training logger and a TensorBoard-compatible ``SummaryWriter``;
* :mod:`~rlarrow.record.replay`: a skrl-style replay memory that exports into a store.

May import :mod:`rlarrow.core` and :mod:`rlarrow.io`; see ``docs/architecture.md``.
"""

__all__: list[str] = []
