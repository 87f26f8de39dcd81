"""An inference checkpoint's merged weights carry a SHA-256 per file in its ``rlnb.json``: safetensors (and
``torch.load``) check no checksum, so a byte changed on disk or in a copy loaded as another number in silence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import rlnb
from rlnb import samples


def local_session(**kw):
    return rlnb.connect("local", model="tiny", device="cpu", record=False, **kw)


@pytest.fixture
def folder(tmp_path) -> Path:
    """A trained model's inference checkpoint."""
    with local_session(checkpoint_dir=tmp_path) as s:
        s.forward_backward([samples.cross_entropy(list(b"digest"))])
        s.optim_step()
        return s.backend.checkpoint_path(s.save_inference_checkpoint().result(timeout=60).checkpoint.id)


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    with local_session(resume_from=folder) as s:
        return {k: v.clone() for k, v in s.backend.trainer.state_dict().items()}


def test_a_flipped_byte_in_the_merged_weights_is_refused_naming_the_file(folder):
    """A flipped bit in a weight's lowest mantissa byte: the session opened on that other number."""
    weights = folder / "merged" / "model.safetensors"
    assert json.loads((folder / "rlnb.json").read_text())["merged_sha256"].keys() == {
        "config.json",
        "model.safetensors",
    }
    data = bytearray(weights.read_bytes())
    data[-4] ^= 0x01  # the last float32's lowest byte: finite, a little other
    weights.write_bytes(bytes(data))
    says = f"{folder.name}.* not a usable rlnb checkpoint: its merged/model.safetensors fails its SHA-256 check"
    with pytest.raises(ValueError, match=says):
        local_session(resume_from=folder)


def test_a_checkpoint_saved_without_digests_still_loads_the_same_weights(folder):
    """An older rlnb's inference checkpoint has no digests: it loads as it did."""
    with_digests = _weights(folder)
    meta = json.loads((folder / "rlnb.json").read_text())
    del meta["merged_sha256"]
    (folder / "rlnb.json").write_text(json.dumps(meta))
    older = _weights(folder)
    assert with_digests.keys() == older.keys() and all(torch.equal(with_digests[k], older[k]) for k in older)


@pytest.mark.parametrize(
    ("digests", "says"),
    [
        ({"../rlnb.json": "0" * 64}, r"merged_sha256 names '\.\./rlnb\.json', not a file of merged/"),
        ({"model.safetensors": "x"}, r"merged_sha256\['model\.safetensors'\] is 'x', not a SHA-256"),
        ({}, r"its merged/model\.safetensors is a weight file that was not in merged/ when it was saved"),
        ({"model.safetensors": "0" * 64, "gone.safetensors": "0" * 64}, r"its merged/gone\.safetensors is missing"),
    ],
)
def test_crafted_digests_are_refused_naming_the_field(folder, digests, says):
    """What the digests name is read: only plain files of merged/, each listed, each there."""
    meta = json.loads((folder / "rlnb.json").read_text())
    meta["merged_sha256"] = digests
    (folder / "rlnb.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=says):
        local_session(resume_from=folder)


def test_a_changed_config_file_is_refused_naming_it(folder):
    """Only the weight files were digested: ``config.json`` (and a Hugging Face model's tokenizer files, its shard
    index), which ``from_pretrained`` reads to build the model, could be changed after the save in silence."""
    config = folder / "merged" / "config.json"
    config.write_text(config.read_text().replace("{", '{"n_layer": 1, ', 1))
    says = f"{folder.name}.* not a usable rlnb checkpoint: its merged/config.json fails its SHA-256 check"
    with pytest.raises(ValueError, match=says):
        local_session(resume_from=folder)


def test_an_older_checkpoint_whose_digests_list_only_its_weights_still_loads(folder):
    """An older rlnb digested the weight files alone: the files it did not list are not refused for that."""
    saved = _weights(folder)
    meta = json.loads((folder / "rlnb.json").read_text())
    meta["merged_sha256"] = {"model.safetensors": meta["merged_sha256"]["model.safetensors"]}
    (folder / "rlnb.json").write_text(json.dumps(meta))
    older = _weights(folder)
    assert saved.keys() == older.keys() and all(torch.equal(saved[k], older[k]) for k in older)


def test_a_weight_file_added_after_the_save_is_refused_saying_so_and_any_other_file_is_not(folder):
    """A weight file put in ``merged/`` after the save corrupts none of the saved ones, but a loader picks its files
    by name (``from_pretrained`` reads ``model.safetensors`` before ``pytorch_model.bin``): it could be read in their
    place, unchecked. It is refused, saying what it is and what to do (the message asked "added after it was
    saved?"); a file no loader reads (notes) is left alone."""
    merged = folder / "merged"
    (merged / "notes.txt").write_text("trained on the digits task")
    saved = _weights(folder)
    (merged / "pytorch_model.bin").write_bytes((merged / "model.safetensors").read_bytes())
    says = (
        f"{folder.name}.* its merged/pytorch_model\\.bin is a weight file that was not in merged/ when it was saved "
        r"\(merged_sha256 does not list it\): a loader could read it in place of the saved weights, unchecked; move "
        r"it out of merged/ to resume"
    )
    with pytest.raises(ValueError, match=says):
        local_session(resume_from=folder)
    (merged / "pytorch_model.bin").unlink()
    again = _weights(folder)
    assert all(torch.equal(saved[k], again[k]) for k in saved)
