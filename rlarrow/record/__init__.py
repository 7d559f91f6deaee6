"""Recording layer: what writes a run while it happens.

* :mod:`~rlarrow.record.dm_env`: :class:`~rlarrow.record.dm_env.EnvLogger`, a dm_env wrapper;
* :mod:`~rlarrow.record.gym`: gymnasium (vector) environment recorders;
* :mod:`~rlarrow.record.logger`: a training logger and a TensorBoard-compatible ``SummaryWriter``;
* :mod:`~rlarrow.record.replay`: a skrl-style replay memory that exports into a store.

May import :mod:`rlarrow.core` and :mod:`rlarrow.io`; see ``docs/architecture.md``.
"""

from typing import Any

from rlarrow.core import submodule

__all__: list[str] = []


def __getattr__(name: str) -> Any:  # a submodule on first use: rlarrow.record.<module>
    return submodule(__name__, name)
