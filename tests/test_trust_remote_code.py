"""``trust_remote_code`` is a bool or refused, before anything is loaded: ``"no"`` is truthy, and a folder's own
Python code (``auto_map``) ran when it was given (review41i F1). The folder with code, run for real, is in
``tests/engine/test_hf.py``; these need no transformers, as the refusal comes first."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

import rlnb
from rlnb.engine.options import ModelOptions
from rlnb.sweep import lr_find
from tests.support.fake_api import BASE, KEY, FakeAPI

REFUSED = r"trust_remote_code must be True or False, got 'no'"


@pytest.mark.parametrize("value", ["no", "false", 0, 1, None, [], "True"])
def test_model_options_refuse_a_non_bool(value):
    with pytest.raises(ValueError, match=r"trust_remote_code must be True or False, got "):
        ModelOptions(trust_remote_code=value)


def test_model_options_keep_a_bool_as_a_plain_bool():
    assert ModelOptions(trust_remote_code=np.True_).trust_remote_code is True
    assert ModelOptions().trust_remote_code is False


def test_local_connect_refuses_it_before_the_folder_is_read(tmp_path):
    """Not the folder's "not found": the option is refused before any model or tokenizer is looked for."""
    with pytest.raises(ValueError, match=REFUSED):
        rlnb.connect("local", model=str(tmp_path / "m"), trust_remote_code="no", record=False)
    with pytest.raises(ValueError, match=REFUSED):
        rlnb.connect("local", tokenizer=str(tmp_path / "t"), trust_remote_code="no", record=False)


def test_remote_connect_refuses_it_before_a_request():
    fake = FakeAPI()
    with pytest.raises(ValueError, match=REFUSED):
        rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(fake), tokenizer="/nowhere/tok",
                     trust_remote_code="no")  # fmt: skip
    assert not fake.calls()


def test_lr_find_refuses_it_before_reading_a_new_sessions_folder(tmp_path):
    """Its prompt check loads a folder's config and tokenizer before any session opens: with ``trust=True``."""
    with pytest.raises(ValueError, match=REFUSED):
        lr_find(rlnb.AdamParams(learning_rate=1e-3), model=str(tmp_path / "m"), trust_remote_code="no")
