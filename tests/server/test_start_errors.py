"""A session whose model could not be built ends ERROR with the reference's code where the cause is clear: out of
memory (the host's ``MemoryError``, torch's ``OutOfMemoryError``) is ``RESOURCE_AT_CAPACITY`` — the resource's compute
holds no more — where every failed build was ``SESSION_FAILED``; torch's, a ``RuntimeError``, while resuming was
blamed on the checkpoint ("does not fit this session"). Any other failure stays ``SESSION_FAILED``."""

import pytest
import torch

from rlnb import wire
from rlnb.engine import model_setup
from rlnb.engine.models.adapter import BuiltinAdapter
from rlnb.server import sessions as sessions_module
from tests.support.no_room import ALLOCATOR, NO_MEMORY, no_memory, no_room
from tests.support.server import app_client, running, submit, wait


def _failing(exc: BaseException):
    def build(*args, **kwargs):
        raise exc

    return build


def _started(c, **body) -> dict:
    rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
    made = c.post("/training-sessions", json={"model_resources_id": rid, **body})
    assert made.status_code == 200, made.text
    return running(c, made.json()["id"])


@pytest.mark.parametrize(
    "exc",
    [MemoryError("Unable to allocate 20.0 GiB"), torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")],
)
def test_out_of_memory_ends_the_session_resource_at_capacity(tmp_path, monkeypatch, exc):
    with app_client(tmp_path) as c:
        monkeypatch.setattr(sessions_module, "make_backend", _failing(exc))
        s = _started(c)
        assert s["status"] == wire.SessionStatus.ERROR
        assert s["error"]["code"] == wire.SessionErrorCode.RESOURCE_AT_CAPACITY
        assert s["error"]["message"].startswith("out of memory building the session's model")
        assert str(exc) in s["error"]["message"]


def test_out_of_memory_while_resuming_is_not_blamed_on_the_checkpoint(tmp_path, monkeypatch):
    with app_client(tmp_path) as c:
        sid = _started(c)["id"]
        ckpt = wait(c, sid, "training-checkpoint", submit(c, sid, "training-checkpoint")["id"])["output"]["checkpoint"]
        monkeypatch.setattr(sessions_module, "make_backend", _failing(torch.OutOfMemoryError("CUDA out of memory")))
        s = _started(c, resume_from_checkpoint_id=ckpt["id"])
        assert s["error"]["code"] == wire.SessionErrorCode.RESOURCE_AT_CAPACITY
        assert "does not fit" not in s["error"]["message"] and "out of memory" in s["error"]["message"]


@pytest.mark.parametrize("kind", ["training-checkpoint", "inference-checkpoint"])
def test_a_checkpoint_too_big_to_read_is_out_of_memory_not_a_damaged_checkpoint(tmp_path, monkeypatch, kind):
    """Through the real build (review41h M1): the checkpoint's reader caught the ``MemoryError`` as its file's fault,
    SESSION_FAILED "... is not a usable rlnb checkpoint: it is a torch file, damaged or cut short (torch.load:
    MemoryError) ...", or "its merged weights ... cannot be loaded". It names the checkpoint it was reading, by the
    id the client sent."""
    with app_client(tmp_path) as c:
        sid = _started(c)["id"]
        ckpt = wait(c, sid, kind, submit(c, sid, kind)["id"])["output"]["checkpoint"]
        if kind == "training-checkpoint":
            monkeypatch.setattr(torch, "load", no_memory)
        else:
            monkeypatch.setattr(BuiltinAdapter, "load_merged", no_memory)
        s = _started(c, resume_from_checkpoint_id=ckpt["id"])
        assert s["status"] == wire.SessionStatus.ERROR
        assert s["error"]["code"] == wire.SessionErrorCode.RESOURCE_AT_CAPACITY
        assert s["error"]["message"] == (f"out of memory building the session's model from checkpoint {ckpt['id']} "
                                         f"(MemoryError): {NO_MEMORY}")  # fmt: skip


def test_the_cpu_allocators_error_in_the_real_build_is_out_of_memory_said_once(tmp_path, monkeypatch):
    """Through the engine's own build (the sampler's copy): torch's CPU allocator raises a plain ``RuntimeError``,
    which ended SESSION_FAILED "building the session's model failed (RuntimeError): ...". The engine's words, with
    their ``connect`` keywords, are no client's: the server says it once, with torch's words."""
    with app_client(tmp_path) as c:
        monkeypatch.setattr(model_setup, "sampler_copy", no_room)
        s = _started(c)
        assert s["error"]["code"] == wire.SessionErrorCode.RESOURCE_AT_CAPACITY
        assert s["error"]["message"] == f"out of memory building the session's model (RuntimeError): {ALLOCATOR}"


def test_any_other_failed_build_stays_session_failed(tmp_path, monkeypatch):
    with app_client(tmp_path) as c:
        monkeypatch.setattr(sessions_module, "make_backend", _failing(OSError("the weights file is gone")))
        s = _started(c)
        assert s["error"]["code"] == wire.SessionErrorCode.SESSION_FAILED
        assert "(OSError)" in s["error"]["message"] and "the weights file is gone" in s["error"]["message"]


@pytest.mark.slow  # peft
def test_a_lora_the_model_cannot_take_is_blamed_on_lora_config(tmp_path):
    """The engine's refusal of the adapters (here a rank past what tiny's 64-wide layers can use) names the client's
    field, once."""
    with app_client(tmp_path, max_lora_rank=128) as c:
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny", "lora_enabled": True}).json()["id"]
        made = c.post("/training-sessions", json={"model_resources_id": rid, "lora_config": {"rank": 100}})
        s = running(c, made.json()["id"])
        assert s["error"]["message"].startswith("lora_config: rank 100 is more than any adapted layer can use"), s


def test_a_model_that_fails_to_build_is_not_blamed_on_lora_config(tmp_path, monkeypatch):
    """A ``ValueError`` of the server's own model (its spec, its dtype) was "lora_config: ..." though the client sent
    none: it names the served model, its spec and the server setting instead."""
    why = ValueError("model 'tinyy' is not a local directory and is not in the local Hugging Face cache")
    with app_client(tmp_path) as c:
        monkeypatch.setattr(sessions_module, "make_backend", _failing(why))
        message = _started(c)["error"]["message"]
    assert "lora_config" not in message
    assert message.startswith(
        "building the session's model failed (ValueError): the server's models['rlnb/tiny'] ('tiny'): model 'tinyy'"
    ), message


@pytest.mark.parametrize("lora", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["full", "lora"])  # peft
def test_a_resume_refused_for_its_dtype_names_the_servers_option(tmp_path, lora):
    """The refusal advised ``dtype='float32'``, a ``connect`` keyword no API client can send: the server's is
    ``rlnb serve --dtype`` (review41b #3)."""
    state, body = tmp_path / "state", {"lora_config": {"rank": 4}} if lora else {}
    with app_client(tmp_path, state_dir=state, dtype="float32") as c:
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny", "lora_enabled": lora}).json()["id"]
        sid = running(c, c.post("/training-sessions", json={"model_resources_id": rid, **body}).json()["id"])["id"]
        ckpt = wait(c, sid, "training-checkpoint", submit(c, sid, "training-checkpoint")["id"])["output"]["checkpoint"]
    with app_client(tmp_path, state_dir=state, dtype="bfloat16") as c:
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny", "lora_enabled": lora}).json()["id"]
        made = c.post("/training-sessions", json={"model_resources_id": rid, "resume_from_checkpoint_id": ckpt["id"]})
        s = running(c, made.json()["id"])
        message = s["error"]["message"]
        assert s["status"] == wire.SessionStatus.ERROR and "float32" in message and "bfloat16" in message
        assert "dtype='float32'" not in message and "resume under rlnb serve --dtype float32" in message
        assert message.endswith(
            "load_optimizer=False to start a new run from its weights in bfloat16"
            if not lora
            else "it adapts the weights as they were; resume under rlnb serve --dtype float32"
        )
