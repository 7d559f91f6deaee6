"""The bottom layer: the data model and the store, importing nothing else of rlarrow.

* :mod:`~rlarrow.core.schema`, :mod:`~rlarrow.core.tensors`, :mod:`~rlarrow.core.metadata`:
  the versioned table schemas, tensor columns, typed metadata;
* :mod:`~rlarrow.core.store`: the store (manifest and journal, commits, compaction, reading);
* :mod:`~rlarrow.core.episodes`, :mod:`~rlarrow.core.step_columns`,
  :mod:`~rlarrow.core.alignment`, :mod:`~rlarrow.core.specs`: episode and step building
  blocks shared by recorders and importers;
* :mod:`~rlarrow.core.remote`, :mod:`~rlarrow.core.migrations`: a store on object storage,
  format migrations;
* :mod:`~rlarrow.core.errors`, :mod:`~rlarrow.core.deps`, :mod:`~rlarrow.core.progress`.

See ``docs/architecture.md`` for what each layer may import.
"""

__all__: list[str] = []
