"""A newer API revision's values in the enums of the answers rlnb reads (a Muon scaling strategy, a checkpoint type):
kept as the server sends them, as the official SDK keeps them, not a refusal of the whole answer."""

import enum
import inspect
import json
import types
import typing

import httpx
import pytest
from pydantic import BaseModel

import rlnb
from rlnb import samples, wire
from rlnb.remote.client import APIClient
from rlnb.wire.base import _Newer, _Request
from tests.support.fake_api import BASE, FAST_POLL, KEY, NOW, FakeAPI, quick

Handler = typing.Callable[[httpx.Request], httpx.Response]
ANSWERS = [
    hint
    for name, method in inspect.getmembers(APIClient, inspect.isfunction)
    if not name.startswith("_") and inspect.isclass(hint := typing.get_type_hints(method).get("return"))
    and issubclass(hint, BaseModel)
] + list(wire.operations.ENVELOPES.values())  # fmt: skip
"""What a client reads from a server, nested models included."""
STRICT: dict[tuple[str, str], str] = {}
"""Enum fields of answers that hold to rlnb's list, and why (``TensorData.dtype`` was one, "read as data": a bfloat16
tensor made the whole forward-backward unreadable, review42a)."""


def flat(annotation: object, marks: tuple = ()) -> typing.Iterator[tuple[object, tuple]]:
    """Each type in ``annotation`` (through ``X | None``, ``list[X]``, ``Annotated[X, ...]``) with its marks."""
    if typing.get_origin(annotation) is typing.Annotated:
        base, *more = typing.get_args(annotation)
        yield from flat(base, (*marks, *more))
    elif typing.get_origin(annotation) in (typing.Union, types.UnionType, list, dict):
        for arg in typing.get_args(annotation):
            yield from flat(arg, marks)
    else:
        yield annotation, marks


def enum_fields(model: type[BaseModel], seen: set[type]) -> typing.Iterator[tuple[type[BaseModel], str, bool]]:
    """(model, field, marked ``Newer`` or given an unknown-code rule) for each enum-valued field under ``model``."""
    if model in seen:
        return
    seen.add(model)
    for name, field in model.model_fields.items():
        for each, marks in flat(field.annotation, tuple(field.metadata)):
            if inspect.isclass(each) and issubclass(each, BaseModel):
                yield from enum_fields(each, seen)
            elif typing.get_origin(each) is typing.Literal or (inspect.isclass(each) and issubclass(each, enum.Enum)):
                yield model, name, any(isinstance(m, _Newer) for m in marks) or hasattr(model, "_unknown_code")


def test_every_enum_an_answer_carries_keeps_a_newer_value_or_says_why_not():
    """A Muon resource's ``scaling_strategy`` and a checkpoint's ``type`` were plain lists: one value of a newer
    revision (R-mid's ``..._MATCH_ADAMW``) refused the whole answer, ``connect`` failed after creating the resource,
    and ``list_checkpoints`` failed for every checkpoint. Every enum of an answer is now ``Newer`` (or maps an unknown
    code), unless ``STRICT`` says why not."""
    found = {(m.__name__.split("[")[0], name): newer for a in ANSWERS for m, name, newer in enum_fields(a, set())}
    assert {wire.SessionList, wire.ModelResourcesList, wire.CheckpointList, wire.SupportedModels} <= set(ANSWERS)
    assert ("MuonOptimizerConfig", "scaling_strategy") in found and ("Checkpoint", "type") in found
    assert not [k for k, newer in found.items() if not newer and k not in STRICT and not issubclass_request(k[0])]


def issubclass_request(name: str) -> bool:
    """Whether the model called ``name`` is a request's (its lists hold: a server refuses what it does not know)."""
    return any(issubclass(c, _Request) for c in vars(wire).values() if inspect.isclass(c) and c.__name__ == name)


def renaming(fake: Handler, old: str, new: str) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        response = fake(request)
        return httpx.Response(response.status_code, content=response.content.replace(old.encode(), new.encode()))

    return handler


def test_a_muon_resource_of_a_newer_revision_connects_and_is_stopped():
    fake = FakeAPI(ready_after=1)
    transport = httpx.MockTransport(
        renaming(fake, "MUON_SCALING_STRATEGY_MATCH_ADAM", "MUON_SCALING_STRATEGY_SPECTRAL")
    )
    s = rlnb.connect(BASE, api_key=KEY, base_model="org/model-a", optimizer="muon", muon_scaling="match_adam",
                     transport=transport, record=False, ready_timeout=5, **FAST_POLL, **quick({}))  # fmt: skip
    assert s.backend.resource.optimizer_config.muon.scaling_strategy == "MUON_SCALING_STRATEGY_SPECTRAL"
    s.close()
    assert [r["status"] for r in fake.resources.values()] == ["MODEL_RESOURCES_STATUS_STOPPED"]


def checkpoint(cid: str, kind: str) -> dict:
    return {"id": cid, "base_model": "m", "created_at": NOW, "session_id": "s", "step": "3", "type": kind}


def test_a_checkpoint_of_a_newer_type_does_not_hide_the_others():
    listed = [checkpoint("c1", "CHECKPOINT_TYPE_TRAINING"), checkpoint("c2", "CHECKPOINT_TYPE_MERGED")]
    answer = httpx.Response(200, json={"data": listed, "meta": {}})
    with APIClient(BASE, KEY, transport=httpx.MockTransport(lambda r: answer), max_retries=0) as client:
        assert [c.type for c in client.list_checkpoints().data] == [
            "CHECKPOINT_TYPE_TRAINING",
            "CHECKPOINT_TYPE_MERGED",
        ]


def test_a_forward_backward_whose_outputs_carry_a_newer_dtype_is_read_and_a_request_still_refuses_it():
    """A ``bfloat16`` tensor in ``loss_fn_outputs`` refused the whole envelope: polled again as unreadable, then a
    forward-backward the server had COMPLETED (its gradients accumulated) was recorded FAILED."""
    fake = FakeAPI(ready_after=1)

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake(request)
        data = json.loads(response.content)
        if "/operations/forward-backward" in request.url.path and data.get("output"):
            tensors = {"logprobs": {"data": [-0.5, -1.25], "dtype": "bfloat16", "shape": [2]}}
            data["output"]["loss_fn_outputs"] = [{"tensors": tensors}]
        return httpx.Response(response.status_code, json=data)

    rid = fake.add_resource({"adam": {}})
    with rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), model_resources_id=rid,
                      ready_timeout=5, record=False, **FAST_POLL, **quick({})) as s:  # fmt: skip
        out = s.forward_backward([samples.cross_entropy([1, 2, 3])], return_loss_fn_outputs=True).result(10)
    assert out.loss == 2.5 and out.loss_fn_outputs is not None
    tensor = out.loss_fn_outputs[0].tensors["logprobs"]
    assert (tensor.data, tensor.dtype) == ([-0.5, -1.25], "bfloat16")
    with pytest.raises(ValueError, match="dtype"):
        wire.TensorData(data=[-0.5], dtype="bfloat16")  # type: ignore[arg-type]  # what a client sends holds to the list
