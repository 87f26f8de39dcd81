"""A bad sampling or loss field is one line naming the field and its bounds (read from the wire model's own metadata),
as a bad optimizer field is, raised before anything is sent: pydantic's report took three lines and a link per field.
``rlnb serve`` still parses request bodies with the wire models (its 400/422 answers: tests/server)."""

import reprlib
from typing import Annotated, Literal

import httpx
import numpy as np
import pytest
import torch
from pydantic import Field, ValidationError

import rlnb
from rlnb import samples, wire
from rlnb.batched.options import StepOptions
from rlnb.tasks import digits_task, rl_step
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, quick

UNSET = "; or unset for the default"
SAMPLING = [  # session.sample's keyword and value -> the line it is refused with
    ({"temperature": -1.0}, f"SamplingParams.temperature = -1.0 is invalid: must be a finite number, >= 0{UNSET}"),
    ({"temperature": float("nan")}, "SamplingParams.temperature = nan is invalid: must be a finite number, >= 0"),
    ({"top_p": 2.0}, f"SamplingParams.top_p = 2.0 is invalid: must be a finite number, > 0 and <= 1{UNSET}"),
    ({"top_p": "high"}, "SamplingParams.top_p = 'high' is invalid: must be a finite number, > 0 and <= 1"),
    ({"max_tokens": 0}, "SamplingParams.max_tokens = 0 is invalid: must be an integer (not a bool or float), >= 1 and "
                        f"<= {wire.INT32_MAX}{UNSET}"),
    ({"top_k": -2}, "SamplingParams.top_k = -2 is invalid: must be an integer (not a bool or float), >= -1 and <= "),
    ({"num_samples": 0}, "SampleBody.num_samples = 0 is invalid: must be an integer (not a bool or float), >= 1 and "),
    ({"topk_prompt_logprobs": 21}, "SampleBody.topk_prompt_logprobs = 21 is invalid: must be an integer (not a bool "
                                   "or float), >= 0 and <= 20"),
]  # fmt: skip
BETA = "must be a finite number, >= 0 and <= 3.4028234663852886e+38"
LOSSES = [  # forward_backward's loss and loss_params -> the line
    ("grpo", {"beta": -1.0}, f"loss_params.beta = -1.0 is invalid: {BETA}{UNSET}"),
    ("ppo", {"clip_low_threshold": 2.0}, f"loss_params.clip_low_threshold = 2.0 is invalid: must be a finite number, "
                                         f"<= 1{UNSET}"),
    ("dppo", {"delta_low": 2, "delta_high": -1}, "loss_params.delta_low = 2 is invalid: must be a finite number, >= 0 "
     f"and <= 1{UNSET}; loss_params.delta_high = -1 is invalid: must be a finite number, >= 0 and <= 1{UNSET}"),
    ("dro", {"beta": float("inf")}, f"loss_params.beta = inf is invalid: {BETA}"),  # required: no default to fall to
    ("grpo", {"use_bias_correction_kl": "yes"}, "loss_params.use_bias_correction_kl = 'yes' is invalid: must be True "
                                                f"or False{UNSET}"),
    ({"type": "LOSS_TYPE_CISPO", "cispo_params": {"clip_high_threshold": 0.5}}, None,
     f"loss.cispo_params.clip_high_threshold = 0.5 is invalid: must be a finite number, >= 1{UNSET}"),
]  # fmt: skip


def refused(said: str, call, *args, **kwargs) -> None:
    """``call(*args, **kwargs)`` raises a ValueError of one line that starts with ``said``."""
    with pytest.raises(ValueError) as info:
        call(*args, **kwargs)
    assert str(info.value).startswith(said) and "\n" not in str(info.value), str(info.value)


def remote(fake: FakeAPI) -> rlnb.Session:
    return rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(fake), ready_timeout=5, record=False,
                        **FAST_POLL, **quick({}))  # fmt: skip


def test_a_bad_sampling_field_is_one_line_before_anything_is_sent_local_or_remote():
    fake = FakeAPI()
    with rlnb.connect("local", device="cpu", record=False) as local, remote(fake) as far:
        for s in (local, far):
            for kwargs, said in SAMPLING:
                if s is local and "num_samples" in kwargs:  # the session's range, within the wire's (review42d L1)
                    said = "num_samples must be in [1, 256] on this in-process session, got 0"
                refused(said, s.sample, [[1, 2]], **kwargs)
            assert len(s.history) == 0
    assert not fake.calls("POST", "operations")  # nothing reached the API


def test_a_bad_loss_field_is_one_line_before_anything_is_sent_local_or_remote():
    fake = FakeAPI()
    batch = [samples.policy([1, 2], [3, 4], [-1.0, -1.0], 0.5)]
    with rlnb.connect("local", device="cpu", record=False) as local, remote(fake) as far:
        for s in (local, far):
            for loss, params, said in LOSSES:
                refused(said, s.forward_backward, batch, loss, params)
            assert len(s.history) == 0
        for loss, params, said in LOSSES[:2]:  # rl_step and a batched trial's options: before anything is sampled
            refused(said, rl_step, local, digits_task(), rlnb.AdamParams(), loss=loss, loss_params=params)
            refused(said, StepOptions, loss=loss, loss_params=params)
        assert len(local.history) == 0
    assert not fake.calls("POST", "operations")


@pytest.mark.parametrize("array", [torch.tensor([0.5]), torch.tensor([[0.5]]), np.array([0.5])], ids=repr)
def test_an_array_is_no_sampling_or_loss_number_whatever_its_size(array):
    """``top_p=torch.tensor([0.5])`` or ``loss_params={"beta": torch.tensor([0.5])}`` was taken as 0.5 (pydantic calls
    its ``__float__``) while numpy's ``array([0.5])`` was refused, and an optimizer field refuses both: refused alike,
    one line naming the field, before anything is sent. A 0-d tensor or numpy scalar is the number it holds."""
    fake = FakeAPI()
    batch = [samples.policy([1, 2], [3, 4], [-1.0, -1.0], 0.5)]
    shown = reprlib.repr(array)
    with rlnb.connect("local", device="cpu", record=False) as local, remote(fake) as far:
        for s in (local, far):
            refused(f"SamplingParams.top_p = {shown} is invalid: must be a finite number, > 0 and <= 1", s.sample,
                    [[1, 2]], max_tokens=1, top_p=array)  # fmt: skip
            refused(f"SampleBody.num_samples = {shown} is invalid: must be an integer", s.sample, [[1, 2]],
                    num_samples=array)  # fmt: skip
            refused(f"loss_params.beta = {shown} is invalid: {BETA}", s.forward_backward, batch, "grpo",
                    {"beta": array})  # fmt: skip
            refused(f"loss.dro_params.beta = {shown} is invalid: {BETA}", s.forward_backward, batch,
                    {"type": "LOSS_TYPE_DRO", "dro_params": {"beta": array}})  # fmt: skip
            assert len(s.history) == 0
        assert local.sample([[1, 2]], max_tokens=1, top_p=torch.tensor(0.5)).result(timeout=60).results
    assert not fake.calls("POST", "operations")


def test_the_wire_models_still_report_as_pydantic_does_for_the_server():
    """``rlnb serve`` answers a bad body from pydantic's errors (tests/server pin its format): the schema is as it was;
    only the user-facing entries say it in one line."""
    with pytest.raises(ValidationError):
        wire.SamplingParams(temperature=-1.0)
    with pytest.raises(ValidationError):
        wire.LossConfig.model_validate({"type": "LOSS_TYPE_GRPO", "grpo_params": {"beta": -1.0}})


def test_a_rule_is_read_from_the_models_metadata():
    """The words follow the bound: a field tightened in ``rlnb.wire`` is said so without another edit."""

    class Narrow(wire._Model):
        k: wire.loss_params.Probability | None = None

    assert wire.field_rule(Narrow, ("k",), "less_than_equal") == f"must be a finite number, >= 0 and <= 1{UNSET}"


def test_a_rule_says_the_fields_type_not_a_word_in_its_annotations_text():
    """The kind was read from the annotation's text: "int" in a description ("a point's share"), in a literal
    (``"int64"``) or a module's name (``rlnb.wire.checkpoints``) made a number "an integer"."""

    class Probe(wire._Model):
        share: Annotated[float, Field(ge=0, le=1, description="a point's share")] | None = None
        flag: Annotated[bool, Field(description="print it")] | None = None
        count: Annotated[int, Field(ge=1)] | None = None
        dtype: Literal["int64", "float32"] = "float32"

    assert wire.field_rule(Probe, ("share",), "float_type") == f"must be a finite number, >= 0 and <= 1{UNSET}"
    assert wire.field_rule(Probe, ("flag",), "bool_type") == f"must be True or False{UNSET}"
    assert wire.field_rule(Probe, ("count",), "int_type") == f"must be an integer (not a bool or float), >= 1{UNSET}"
    assert wire.field_rule(Probe, ("dtype",), "literal_error") == "literal_error"  # no number: pydantic's own words
    assert wire.field_rule(Probe, ("dtype",), "literal_error", "Input should be 'int64'") == "Input should be 'int64'"
