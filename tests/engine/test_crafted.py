"""Crafted checkpoints given as ``resume_from`` (issue 19 §1.15): each is a ``ValueError`` that names the file and
what is wrong — never a raw KeyError, TypeError, RecursionError, FileNotFoundError or SafetensorError, and
never torch's advice to load with ``weights_only=False`` (which would run the file's code), not even in the
exception chain."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

import rlnb
from rlnb.engine.backend import LocalBackend

pytestmark = pytest.mark.slow  # ~20 sessions built and refused


class RunsCode:
    """Pickles as a call of ``os.getcwd``: a file holding it runs code when unpickled without weights_only."""

    def __reduce__(self):
        return (os.getcwd, ())


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Path, Path, dict]:
    """A real training checkpoint (.pt), a real inference checkpoint folder, and the training one's contents."""
    where = tmp_path_factory.mktemp("ck")
    with rlnb.connect("local", model="tiny", device="cpu", record=False, checkpoint_dir=where) as s:
        s.forward_backward([rlnb.samples.cross_entropy(list(b"crafted"))])
        s.optim_step()
        pt = s.backend.checkpoint_path(s.save_training_checkpoint().result(timeout=60).checkpoint.id)
        folder = s.backend.checkpoint_path(s.save_inference_checkpoint().result(timeout=60).checkpoint.id)
    return pt, folder, torch.load(pt, weights_only=True)


def training(changes: dict | None = None, drop: str | None = None):
    def make(state: dict, path: Path) -> None:
        torch.save({k: v for k, v in {**state, **(changes or {})}.items() if k != drop}, path)

    return make


def inference(mutate):
    def make(folder: Path, path: Path) -> None:
        shutil.copytree(folder, path)
        mutate(path)

    return make


MISFIT = "its optimizer state does not fit this session's adam optimizer"
TRAINING = {
    "garbage": (lambda state, path: path.write_bytes(b"\x80\x02 not a checkpoint"), r"torch\.load: UnpicklingError"),
    "code": (lambda state, path: torch.save({"type": "training", "x": RunsCode()}, path), r"unsupported GLOBAL"),
    "no-base-model": (training(drop="base_model"), "it has no base_model"),
    "no-optimizer": (training(drop="optimizer"), "it has no optimizer"),
    "no-step": (training(drop="step"), "it has no step"),
    "weights-list": (training({"weights": [1, 2]}), "its weights is list, expected dict"),
    "weights-not-tensors": (training({"weights": {"wte.weight": 1}}), "its weights are not named tensors"),
    "step-text": (training({"step": "3"}), "its step is str, expected int"),
    "step-negative": (training({"step": -1}), "its step is -1"),
    # the session opened; its first optim-step failed INTERNAL_ERROR (2**63 - 1), or pydantic's ValidationError
    # naming no file stopped the session (2**70)
    "step-int64-max": (training({"step": 2**63 - 1}), r"its step is 9223372036854775807, past 2\*\*63 - 2"),
    "step-past-int64": (training({"step": 2**70}), r"its step is 1180591620717411303424, past 2\*\*63 - 2"),
    "ns-dtype": (training({"ns_dtype": "int8"}), "its ns_dtype 'int8' is not one of"),
    "seed-text": (training({"seed": "3"}), "its seed is str, expected int"),
    "optimizer-junk": (training({"optimizer": {"kind": "adam", "adamw": {}, "momentum": {}}}), MISFIT),
    "optimizer-muon": (training({"optimizer": {"kind": "muon", "adamw": None, "momentum": {}}}), MISFIT),
}


@pytest.mark.parametrize("case", TRAINING)
def test_a_crafted_training_checkpoint_is_a_value_error_naming_it(saved, tmp_path, case):
    make, problem = TRAINING[case]
    path = tmp_path / f"{case}.pt"
    make(saved[2], path)
    with pytest.raises(ValueError, match=problem) as info:
        LocalBackend("adam", "tiny", device="cpu", resume_from=path)
    assert_clean(info.value, path)


def deep_json(path: Path) -> None:
    (path / "rlnb.json").write_text("[" * 100_000 + "]" * 100_000)


def rlnb_json(**changes):
    def mutate(path: Path) -> None:
        meta = json.loads((path / "rlnb.json").read_text())
        (path / "rlnb.json").write_text(json.dumps({k: v for k, v in {**meta, **changes}.items() if v != "DROP"}))

    return mutate


def undigested(change):
    """``change``, in a checkpoint saved without ``merged_sha256`` (an older rlnb's): its loader sees the files."""

    def mutate(path: Path) -> None:
        change(path)
        rlnb_json(merged_sha256="DROP")(path)

    return mutate


INFERENCE = {
    "deep-rlnb-json": (inference(deep_json), r"rlnb\.json: RecursionError"),
    "no-base-model": (inference(rlnb_json(base_model="DROP")), "it has no base_model"),
    "step-list": (inference(rlnb_json(step=[1])), "its step is list, expected int"),
    "no-merged": (inference(lambda p: shutil.rmtree(p / "merged")), r"merged weights folder .*merged is gone"),
    "damaged-safetensors": (
        inference(
            undigested(lambda p: (p / "merged" / "model.safetensors").write_bytes(b"\x08" + b"\x00" * 7 + b"{damaged"))
        ),
        r"cannot be loaded \(SafetensorError",
    ),
    "other-model": (
        inference(
            undigested(
                lambda p: __import__("safetensors.torch").torch.save_file(
                    {"x": torch.zeros(1)}, str(p / "merged" / "model.safetensors")
                )
            )
        ),  # fmt: skip
        r"cannot be loaded \(ValueError: not a checkpoint of this model: missing",
    ),
    "other-model-digested": (
        inference(
            lambda p: __import__("safetensors.torch").torch.save_file(
                {"x": torch.zeros(1)}, str(p / "merged" / "model.safetensors")
            )
        ),  # fmt: skip
        r"its merged/model\.safetensors fails its SHA-256 check",
    ),
}


@pytest.mark.parametrize("case", INFERENCE)
def test_a_crafted_inference_checkpoint_is_a_value_error_naming_it(saved, tmp_path, case):
    make, problem = INFERENCE[case]
    path = tmp_path / case
    make(saved[1], path)
    with pytest.raises(ValueError, match=problem) as info:
        LocalBackend("adam", "tiny", device="cpu", resume_from=path)
    assert_clean(info.value, path)


def assert_clean(exc: BaseException, path: Path) -> None:
    """The error names the file; nothing in it or its chain advises weights_only=False."""
    assert str(path) in str(exc)
    chain: list[BaseException] = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert all("weights_only" not in str(e) for e in chain), [str(e) for e in chain]
    assert all(isinstance(e, ValueError) for e in chain[:1])


def test_the_real_checkpoints_still_resume(saved):
    pt, folder, state = saved
    for path, step in ((pt, 1), (folder, 0)):  # an inference checkpoint restores the weights alone
        backend = LocalBackend("adam", "tiny", device="cpu", resume_from=path)
        assert backend.session().step == step and state["step"] == 1
        backend.close()


@pytest.fixture(scope="module")
def lora_saved(tmp_path_factory) -> tuple[Path, dict]:
    """A real LoRA session's training checkpoint and its contents."""
    where = tmp_path_factory.mktemp("lora")
    with rlnb.connect("local", model="tiny", device="cpu", record=False, checkpoint_dir=where, lora=True) as s:
        pt = s.backend.checkpoint_path(s.save_training_checkpoint().result(timeout=60).checkpoint.id)
    return pt, torch.load(pt, weights_only=True)


BAD_LORA = {
    "alpha-inf": ({"alpha": float("inf")}, "its lora alpha is inf: Input should be a valid integer"),
    "alpha-nan": ({"alpha": float("nan")}, "its lora alpha is nan: Input should be a valid integer"),
    "alpha-bool": ({"alpha": True}, "its lora alpha is True: Input should be a valid integer"),
    "rank-text": ({"rank": "8"}, "its lora rank is '8': Input should be a valid integer"),
    "rank-zero": ({"rank": 0}, "its lora rank is 0: Input should be greater than or equal to 1"),
    "dropout-nan": ({"dropout": float("nan")}, "its lora dropout is nan: Input should be less than 1"),
    "unembed-text": ({"train_unembed": "yes"}, "its lora train_unembed is 'yes': Input should be a valid boolean"),
}


@pytest.mark.parametrize("case", BAD_LORA)
@pytest.mark.parametrize("lora", [True, None])
def test_a_checkpoints_crafted_lora_settings_are_a_value_error_naming_it(lora_saved, tmp_path, case, lora):
    """Resume takes the saved settings for those ``lora=`` leaves out: an infinite alpha was pydantic's bare
    ``ValidationError`` ("LoraConfig alpha: Input should be a valid integer") naming no file, a text rank a
    ``TypeError``, a NaN alpha a mismatch with itself; a full-weight resume said "differ in LoRA" of a damaged file."""
    pt, state = lora_saved
    change, problem = BAD_LORA[case]
    path = tmp_path / f"{case}.pt"
    torch.save({**state, "lora": {**state["lora"], **change}}, path)
    with pytest.raises(ValueError, match=f"is not a usable rlnb checkpoint: {re.escape(problem)}") as info:
        LocalBackend("adam", "tiny", device="cpu", resume_from=path, lora=lora)
    assert_clean(info.value, path)
    assert type(info.value) is ValueError


def test_an_inference_checkpoints_crafted_lora_settings_are_refused_naming_it(saved, tmp_path):
    path = tmp_path / "lora-nan"
    inference(rlnb_json(lora={"rank": 8, "alpha": float("nan")}))(saved[1], path)
    with pytest.raises(ValueError, match=r"rlnb\.json' is not a usable rlnb checkpoint: its lora alpha is nan"):
        LocalBackend("adam", "tiny", device="cpu", resume_from=path)
