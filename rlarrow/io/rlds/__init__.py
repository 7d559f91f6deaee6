"""RLDS datasets in TFDS directories, read to Arrow and written from any episode source, without TensorFlow.

A TFDS dataset directory (what ``tfds`` builders, envlogger's TFDS backend and the Open
X-Embodiment releases write) holds ``dataset_info.json`` (splits, shard lengths), ``features.json``
(the feature tree) and TFRecord shards ``<name>-<split>.tfrecord-<shard>``. Each record is a
serialized ``tf.train.Example`` holding one RLDS episode: its ``steps`` (a ``Dataset`` feature,
every step's values concatenated under ``steps/<field>``) and its episode-level fields.

This package reads them with rlarrow's own TFRecord framing (both CRC-32Cs checked,
:mod:`rlarrow.io.codecs.tfrecord`) and protobuf (``tf.train.Example``'s message types built at run
time: no TensorFlow, no compiled ``.proto``), one shard and one episode at a time, so memory
stays bounded by the largest episode. Values come back as ``tfds`` gives them:

- ``Tensor`` features in their dtype and shape (TFDS stores floats as float32 and integers and
  bools as int64 on disk: a float64 feature holds float32 values);
- ``Image`` features decoded to uint8 ``(H, W, C)`` arrays: PNG with Pillow, JPEG with
  simplejpeg set as TensorFlow decodes (integer-fast DCT), which gives ``tfds``'s pixels exactly
  (without simplejpeg, Pillow's decoder: a few units off in some pixels), or on request
  (``images="encoded"``) kept as the PNG/JPEG bytes the shard holds, for :func:`decode_image`
  to decode on demand; ``Text`` as ``str``; ``ClassLabel`` as int64.

Steps are already in RLDS alignment (``runs.alignment = 'rlds'``): ``observation``, ``action``
(tensors or dicts of them), ``reward``, ``discount`` (scalars), ``is_first``, ``is_last``,
``is_terminal``. On a step with ``is_last`` the action, reward and discount are undefined in
RLDS; they are stored null, and kept in the step's ``metadata`` as ``rlds_last`` where they
are not all zero. Observation fields that are not tensors (a ``language_instruction``) and
every other step field are the step's ``metadata``; episode-level fields are the episode's
``metadata``, with its ``split``. One run per dataset (all splits, in ``dataset_info.json``'s
order); its ``metadata`` holds ``dataset_info`` and ``features`` as the files had them.

The package, by concept: :mod:`~rlarrow.io.rlds.rlds_dataset` (the directory, ``features.json``,
``tf.train.Example``), :mod:`~rlarrow.io.rlds.rlds_decoding` (tensors, text, images),
:mod:`~rlarrow.io.rlds.rlds_reading` (:func:`read_rlds`, an episode source without a store, and
:func:`import_rlds`, ``ingest(store, read_rlds(...))``), :mod:`~rlarrow.io.rlds.rlds_writing`
(:func:`write_rlds` from any episode source, :func:`export_rlds` of a stored run).

Example:
    >>> from rlarrow.io.rlds import import_rlds, read_rlds  # doctest: +SKIP
    >>> source = read_rlds("~/tensorflow_datasets/bridge/0.1.0", images="encoded")  # doctest: +SKIP
    >>> steps, episodes = source.read()  # doctest: +SKIP
    >>> import_rlds("~/tensorflow_datasets/bridge/0.1.0", "runs.rlarrow")  # doctest: +SKIP
"""

from __future__ import annotations

from rlarrow.io.rlds.rlds_dataset import Feature as Feature
from rlarrow.io.rlds.rlds_dataset import dataset_dir as dataset_dir
from rlarrow.io.rlds.rlds_dataset import example_class, is_rlds_dir
from rlarrow.io.rlds.rlds_dataset import parse_features as parse_features
from rlarrow.io.rlds.rlds_decoding import decode_image
from rlarrow.io.rlds.rlds_reading import (
    IMAGE_MODES as IMAGE_MODES,
)
from rlarrow.io.rlds.rlds_reading import (
    RLDS_STEP_FIELDS as RLDS_STEP_FIELDS,
)
from rlarrow.io.rlds.rlds_reading import (
    Episode,
    RldsOptions,
    import_rlds,
    read_episodes,
    read_rlds,
)
from rlarrow.io.rlds.rlds_writing import RldsWriteOptions, export_rlds, write_rlds

_example_class = example_class  # (its old name: tests build tf.train.Example records with it)

__all__ = [
    "Episode", "RldsOptions", "RldsWriteOptions", "decode_image", "export_rlds", "import_rlds", "is_rlds_dir",
    "read_episodes", "read_rlds", "write_rlds",
]
