"""A missing optional extra is named, with the pip command that installs it, in one wording (``rlnb._extras.need``),
at the user's call that needs it."""

from __future__ import annotations

import json
import re
import sys

import pytest

import rlnb
from rlnb.history import History


def test_a_hugging_face_folder_without_transformers_names_the_hf_extra(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if it were not installed
    with pytest.raises(ImportError, match=re.escape("a Hugging Face model needs transformers: pip install 'rlnb[hf]'")):
        rlnb.connect("local", model=str(tmp_path), device="cpu", record=False)


def test_to_parquet_without_pyarrow_names_the_parquet_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=re.escape("to_parquet needs pyarrow: pip install 'rlnb[parquet]'")):
        History().to_parquet(tmp_path / "ops.parquet")
    assert not (tmp_path / "ops.parquet").exists()
