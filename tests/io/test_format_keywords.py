"""Every format's public ``read_<format>``/``import_<format>`` takes its options as keywords.

Each format declares its options as a small dataclass (:attr:`rlarrow.io.registry.Format.options`)
that the CLI builds; a user of the Python API passes the same options as keywords, listed in the
function's docstring. An options object may be given as well (``options=``), never both.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect

import pytest
from conftest import FIXTURES

from rlarrow.core.errors import ArgumentError, UnsupportedInputError
from rlarrow.io import registry

#: per format: its public functions, and the keyword each options field is passed as (where named otherwise)
FUNCTIONS = {
    "pt": (["rlarrow.io.memory.importer:import_memory"], {}),
    "envlogger": (["rlarrow.io.envlogger:import_envlogger", "rlarrow.io.envlogger:read_envlogger"], {}),
    "minari": (["rlarrow.io.minari:import_minari", "rlarrow.io.minari:read_minari"], {}),
    "rlds": (["rlarrow.io.rlds:import_rlds", "rlarrow.io.rlds:read_rlds"], {}),
    "lerobot": (["rlarrow.io.lerobot:import_lerobot", "rlarrow.io.lerobot:read_lerobot"], {}),
    "hdf5": (["rlarrow.io.hdf5:import_hdf5", "rlarrow.io.hdf5:read_hdf5"],
             {"allow_links": "allow_hdf5_links"}),
    "tfevents": (["rlarrow.io.tfevents:import_tfevents", "rlarrow.io.tfevents:read_tfevents"],
                 {"skip_corrupt": "on_corrupt"}),
}


def _function(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def test_every_format_with_options_is_checked_here():
    groups = {f.group for f in registry.FORMATS.values() if f.options is not None}
    assert groups == {registry.get(name).group for name in FUNCTIONS}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_each_option_is_a_documented_keyword_of_the_public_functions(name):
    options = registry.get(name).options_type()
    assert options is not None and dataclasses.is_dataclass(options)
    specs, renamed = FUNCTIONS[name]
    for spec in specs:
        function = _function(spec)
        parameters = inspect.signature(function).parameters
        doc = inspect.getdoc(function) or ""
        for field in dataclasses.fields(options):
            keyword = renamed.get(field.name, field.name)
            assert keyword in parameters, f"{spec} takes no {keyword}= ({options.__name__}.{field.name})"
            assert parameters[keyword].kind is inspect.Parameter.KEYWORD_ONLY, (spec, keyword)
            said = (f"``{keyword}``", f"{keyword}:", f"``{keyword}=")
            assert any(w in doc for w in said), f"{spec}'s docstring does not say {keyword}"


needs_h5py = pytest.mark.skipif(importlib.util.find_spec("h5py") is None,
                                reason="HDF5 files need h5py: pip install 'rlarrow[hdf5]'")
D4RL = FIXTURES / "hdf5" / "d4rl_writer.hdf5"


@needs_h5py
def test_read_hdf5_keywords_do_what_its_options_do():
    from rlarrow.io.hdf5 import HDF5Options, read_hdf5

    with read_hdf5(D4RL, run_id="r", chunk_bytes=512) as by_keyword:
        chunks = list(by_keyword)
    with read_hdf5(D4RL, run_id="r", options=HDF5Options(chunk_bytes=512)) as by_options:
        same = list(by_options)
    with read_hdf5(D4RL, run_id="r") as whole:
        one = list(whole)
    assert len(chunks) == len(same) > len(one)  # the keyword cut the file into the same small chunks
    for a, b in zip(chunks, same, strict=True):
        assert a.steps.equals(b.steps)
    with pytest.raises(UnsupportedInputError, match="not a robomimic file"):
        read_hdf5(D4RL, layout="robomimic")
    with pytest.raises(ArgumentError, match="not both"):
        read_hdf5(D4RL, chunk_bytes=512, options=HDF5Options())


@needs_h5py
def test_import_hdf5_old_call_form_still_works(tmp_path):
    from rlarrow.io.hdf5 import import_d4rl, import_hdf5

    report = import_hdf5(D4RL, tmp_path / "a", run_id="r", chunk_bytes=512, layout="d4rl")
    again = import_d4rl(D4RL, tmp_path / "b", run_id="r")
    assert report.steps == again.steps > 0
