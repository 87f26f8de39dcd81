"""A named pipe given as, or put in place of, a checkpoint file that resume reads: refused as it is opened
(``_files.regular``), naming it, never read. A ``.pt`` that became a pipe after the options looked (they refuse one
given as such) was opened by ``torch.load`` by name, and ``rlnb.json`` swapped for one after ``refuse_pipes`` looked
was read: each waited for ever for a writer. Swaps are made inside the step before the read (monkeypatched), with a
real pipe; each call runs with a deadline."""

import json
import os
from pathlib import Path

import pytest
import torch

from rlnb._files import release
from rlnb.engine import checkpoint_files, checkpoints, held
from rlnb.engine.checkpoint_files import UnsafeCheckpointFile
from tests.support.pipes import refusal_in_time, result_in_time

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")

CPU = torch.device("cpu")


def load(path: Path):
    return lambda: checkpoints.load(path, CPU)


def test_a_training_checkpoint_that_is_a_pipe_is_refused_naming_it(tmp_path):
    pt = tmp_path / "ckpt-train.pt"
    os.mkfifo(pt)
    said = refusal_in_time(load(pt), pt, UnsafeCheckpointFile)
    assert str(said) == (f"resume_from {str(pt)!r}: its {pt} is not a regular file (a pipe, a device, a socket): "
                         "reading it would wait for ever")  # fmt: skip


def test_a_training_checkpoint_swapped_for_a_pipe_after_torch_load_is_checked_as_loaded(tmp_path, monkeypatch):
    """The CRC-32 check and the zip test opened the file again by name: a pipe put there after ``torch.load`` was
    waited on. They read the descriptor ``torch.load`` read."""
    pt = tmp_path / "ckpt-train.pt"
    torch.save({"type": "training", "weights": {"w": torch.ones(2)}, "optimizer": {}, "step": 3, "base_model": "tiny"},
               pt)  # fmt: skip
    real = torch.load

    def load_then_swap(*args, **kwargs):
        state = real(*args, **kwargs)
        pt.unlink()
        os.mkfifo(pt)
        return state

    monkeypatch.setattr(checkpoints.torch, "load", load_then_swap)
    got = result_in_time(load(pt), pt)
    assert got["step"] == 3 and torch.equal(got["weights"]["w"], torch.ones(2))


def test_an_inference_checkpoints_rlnb_json_swapped_for_a_pipe_is_refused_on_resume(tmp_path, monkeypatch):
    folder = tmp_path / "ckpt-infer"
    (folder / "merged").mkdir(parents=True)
    target = folder / "rlnb.json"
    target.write_text(json.dumps({"type": "inference", "step": 1, "base_model": "tiny"}))
    real = checkpoint_files.refuse_pipes

    def check_then_swap(path: Path) -> None:
        real(path)
        target.unlink()
        os.mkfifo(target)

    monkeypatch.setattr(checkpoints, "refuse_pipes", check_then_swap)
    said = refusal_in_time(load(folder), target, UnsafeCheckpointFile)
    assert str(said).startswith(f"resume_from {str(folder)!r}: its {target} is not a regular file (a pipe"), said


def test_a_pipe_among_the_merged_files_is_still_refused_before_a_loader_reads(tmp_path):
    folder = tmp_path / "ckpt-infer"
    (folder / "merged").mkdir(parents=True)
    (folder / "rlnb.json").write_text(json.dumps({"type": "inference", "step": 1, "base_model": "tiny"}))
    os.mkfifo(folder / "merged" / "model.safetensors")
    said = refusal_in_time(load(folder), folder / "merged" / "model.safetensors", UnsafeCheckpointFile)
    assert f"its {folder}/merged/model.safetensors is not a regular file" in str(said)


def test_a_scratch_folder_whose_lock_file_is_a_pipe_is_kept_not_waited_on(tmp_path, monkeypatch):
    """``rlnb serve``'s start sweeps the scratch folders that killed servers left in the temporary folder, which any
    user may write: a pipe at one's lock file (another user's, a hostile one) was opened waiting for a writer, and the
    server never started. It is opened without waiting now, and kept as a folder that is not rlnb's."""
    monkeypatch.setattr(held.tempfile, "tempdir", str(tmp_path))
    planted = tmp_path / f"{held.SCRATCH_PREFIX}planted"
    planted.mkdir()
    os.mkfifo(planted / held._SCRATCH_LOCK)
    folder, lock = result_in_time(held.scratch_folder, planted / held._SCRATCH_LOCK)
    release(lock)
    assert planted.is_dir() and folder.is_dir() and folder != planted
