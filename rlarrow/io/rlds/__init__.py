"""RLDS datasets in TFDS directories, without TensorFlow (:mod:`rlarrow.io.rlds.rlds_reading`).

Example:
    >>> from rlarrow.io.rlds import import_rlds  # doctest: +SKIP
    >>> import_rlds("~/tensorflow_datasets/bridge/0.1.0", "runs.rlarrow")  # doctest: +SKIP
"""

from __future__ import annotations

from rlarrow.io.rlds.rlds_reading import (
    IMAGE_MODES,
    RLDS_STEP_FIELDS,
    Episode,
    Feature,
    _example_class,
    dataset_dir,
    decode_image,
    export_rlds,
    import_rlds,
    is_rlds_dir,
    parse_features,
    read_episodes,
)

__all__ = [
    "IMAGE_MODES",
    "RLDS_STEP_FIELDS",
    "Episode",
    "Feature",
    "dataset_dir",
    "decode_image",
    "export_rlds",
    "import_rlds",
    "is_rlds_dir",
    "parse_features",
    "read_episodes",
]

_example_class = _example_class  # (tests build tf.train.Example records with it)
