"""Training checkpoints damaged or crafted in ways ``torch.load`` does not see: bytes changed inside a tensor's
record (torch reads no CRC-32), weights or accumulated gradients that are not finite or not floating-point. Each is a
``ValueError`` at ``connect`` naming the file and what is wrong, not a session that opens on other numbers."""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import pytest
import torch

import rlnb
from rlnb import samples
from rlnb.engine.checkpoint_checks import file_digests
from tests.support.no_room import no_room

pytestmark = pytest.mark.slow  # six sessions built, five of them refused


def local_session(**kw):
    return rlnb.connect("local", model="tiny", device="cpu", record=False, **kw)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A real training checkpoint saved between a forward-backward and its optim-step (it holds gradients)."""
    where = tmp_path_factory.mktemp("ck")
    with local_session(checkpoint_dir=where) as s:
        s.forward_backward([samples.cross_entropy(list(b"damaged"))])
        s.optim_step()
        s.forward_backward([samples.cross_entropy(list(b"damaged"))])
        return s.backend.checkpoint_path(s.save_training_checkpoint().result(timeout=60).checkpoint.id)


def _flipped(saved: Path, tmp_path: Path) -> Path:
    """A copy of ``saved`` with one bit of one float of its largest tensor changed."""
    with zipfile.ZipFile(saved) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(saved.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    data[start + 100] ^= 0x40
    damaged = tmp_path / "flipped.pt"
    damaged.write_bytes(bytes(data))
    return damaged


def test_bytes_changed_inside_a_tensor_record_are_refused_naming_the_record(saved, tmp_path):
    """torch.load checks no CRC-32: a flipped byte inside a weight loaded as another number, and the session opened."""
    damaged = _flipped(saved, tmp_path)
    with zipfile.ZipFile(saved) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with pytest.raises(ValueError, match=rf"flipped\.pt.*{info.filename}.*CRC-32"):
        local_session(resume_from=damaged, load_optimizer=True)
    with local_session(resume_from=saved, load_optimizer=True) as s:  # the file it was copied from still resumes
        assert s.forward_backward([samples.cross_entropy(list(b"ok"))]).result(timeout=60).loss > 0


def test_a_damaged_file_whose_load_runs_out_of_memory_is_still_damaged(saved, tmp_path, monkeypatch):
    """A changed byte in a tensor's size makes ``torch.load`` ask for more memory than there is: out of memory (no
    fault of the file, review41h M1) is said only of a file whose records are as ``torch.save`` wrote them."""
    damaged = _flipped(saved, tmp_path)
    monkeypatch.setattr(torch, "load", no_room)
    with pytest.raises(ValueError, match=r"flipped\.pt.*CRC-32") as caught:
        local_session(resume_from=damaged)
    assert not isinstance(caught.value, MemoryError)
    with pytest.raises(MemoryError, match="out of memory building the session's model"):
        local_session(resume_from=saved)


def test_a_record_whose_zip_header_is_damaged_is_refused_saying_so_not_as_a_crc_failure(saved, tmp_path):
    """A changed byte in a record's local header (its file name), which ``torch.load`` reads past: zipfile's
    ``BadZipFile`` was worded as a CRC-32 failure of the record's data, which was intact."""
    with zipfile.ZipFile(saved) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(saved.read_bytes())
    data[info.header_offset + 30] ^= 0x01  # the first character of the header's copy of the record's name
    damaged = tmp_path / "header.pt"
    damaged.write_bytes(bytes(data))
    assert torch.load(damaged, weights_only=True)["step"] >= 0  # torch reads it: only the check can see it
    says = rf"header\.pt.* not a usable rlnb checkpoint: its record {info.filename}'s zip header is damaged \(File name"
    with pytest.raises(ValueError, match=says) as err:
        local_session(resume_from=damaged, load_optimizer=True)
    assert "CRC" not in str(err.value)


def crafted(saved: Path, tmp_path: Path, key: str, change) -> Path:
    state = torch.load(saved, weights_only=True)
    name = next(iter(state[key]))
    state[key] = {**state[key], name: change(state[key][name])}
    path = tmp_path / f"{key}.pt"
    torch.save(state, path)
    return path


@pytest.mark.parametrize(
    ("key", "change", "says"),
    [
        ("weights", lambda t: torch.full_like(t, float("nan")), "its weights' 'wte.weight' is not finite"),
        ("weights", lambda t: t.to(torch.int64), "its weights' 'wte.weight' is torch.int64, expected floating-point"),
        ("grads", lambda t: t.clone().fill_(float("inf")), "its grads' 'wte.weight' is not finite"),
        ("grads", lambda t: t.to(torch.int32), "its grads' 'wte.weight' is torch.int32, expected floating-point"),
    ],
)
def test_weights_or_gradients_that_are_not_finite_floats_are_refused_naming_them(saved, tmp_path, key, change, says):
    """NaN weights opened the session and failed its first forward-backward NON_FINITE_LOSS naming nothing;
    integer ones were cast in silence (another model); the gradients went to the next optim-step the same ways."""
    path = crafted(saved, tmp_path, key, change)
    with pytest.raises(ValueError, match=rf"{path.name}.*not a usable rlnb checkpoint: {says}"):
        local_session(resume_from=path, load_optimizer=True)


def test_a_checkpoint_saved_without_crcs_still_resumes(saved, tmp_path):
    """``torch.serialization.set_crc32_options(False)`` writes 0 as every record's CRC-32, and torch loads such a
    file: the check leaves those records alone rather than refusing every one."""
    state = torch.load(saved, weights_only=True)
    path = tmp_path / "no-crc.pt"
    torch.serialization.set_crc32_options(False)
    try:
        torch.save(state, path)
    finally:
        torch.serialization.set_crc32_options(True)
    with zipfile.ZipFile(path) as z:
        assert {i.CRC for i in z.infolist()} == {0}
    with local_session(resume_from=path, load_optimizer=True) as s:
        assert s.info().step == state["step"]


def test_merged_weights_that_are_not_finite_are_refused_naming_them(tmp_path):
    """An inference checkpoint's merged weights go through the same check as a training checkpoint's."""
    from safetensors.torch import load_file, save_file

    with local_session(checkpoint_dir=tmp_path) as s:
        folder = s.backend.checkpoint_path(s.save_inference_checkpoint().result(timeout=60).checkpoint.id)
    weights = load_file(str(folder / "merged" / "model.safetensors"))
    name = next(k for k in weights if weights[k].is_floating_point())
    weights[name] = torch.full_like(weights[name], float("inf"))
    save_file(weights, str(folder / "merged" / "model.safetensors"))
    meta = json.loads((folder / "rlnb.json").read_text())  # crafted with its digest: the values are checked too
    meta["merged_sha256"] = file_digests(folder / "merged")
    (folder / "rlnb.json").write_text(json.dumps(meta))
    says = "not a usable rlnb checkpoint: its weights' '.+' is not finite"
    with pytest.raises(ValueError, match=rf"{folder.name}.*{says}"):
        local_session(resume_from=folder)
