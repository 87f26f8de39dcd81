"""A wire model's scalar number fields (``NUMBER_ONLY``) take Python ints and floats only: pydantic's strict float took
any object with ``__float__``, so a hand-built ``GrpoLossParams(beta=torch.tensor([0.1]))`` held 0.10000000149011612.
rlnb's own entry points take a numpy or 0-d torch scalar as the number it holds before building one."""

from decimal import Decimal
from typing import Annotated

import numpy as np
import pytest
import torch
from pydantic import BaseModel, Field, Strict, ValidationError

import rlnb
from rlnb import wire
from tests.support.calls import python_calls

FIELDS = [
    (wire.GrpoLossParams, "beta"),
    (wire.GrpoLossParams, "clip_high_threshold"),
    (wire.PpoLossParams, "clip_low_threshold"),
    (wire.DppoLossParams, "delta_low"),
    (wire.AdamParams, "learning_rate"),
    (wire.AdamParams, "beta1"),
    (wire.AdamParams, "eps"),
    (wire.AdamParams, "weight_decay"),
    (wire.MuonParams, "momentum"),
    (wire.SamplingParams, "temperature"),
    (wire.SamplingParams, "top_p"),
    (wire.LoraConfig, "dropout"),
]
NO_NUMBERS = {
    "tensor([0.5])": lambda: torch.tensor([0.5]),
    "0-d tensor": lambda: torch.tensor(0.5),
    "np.float32": lambda: np.float32(0.5),
    "Decimal": lambda: Decimal("0.5"),
}


@pytest.mark.parametrize(("model", "name"), FIELDS, ids=[f"{m.__name__}.{n}" for m, n in FIELDS])
@pytest.mark.parametrize("value", NO_NUMBERS.values(), ids=NO_NUMBERS)
def test_a_wire_number_field_refuses_what_is_no_python_number_naming_the_field(model, name, value):
    """A 0-d tensor too: a tensor is no JSON number, whatever its shape (rlnb's entry points read it first)."""
    with pytest.raises(ValidationError) as raised:
        model(**{name: value()})
    assert [(e["loc"], e["type"]) for e in raised.value.errors()] == [((name,), "float_type")]


@pytest.mark.parametrize(("model", "name"), FIELDS, ids=[f"{m.__name__}.{n}" for m, n in FIELDS])
def test_a_wire_number_field_takes_python_numbers_and_json_as_before(model, name):
    number = 1.0 if name == "clip_high_threshold" else 0.5  # in the field's range
    for given in (number, np.float64(number)):  # np.float64 is a float
        held = getattr(model(**{name: given}), name)
        assert held == number and type(held) is float
    assert getattr(model.model_validate_json(f'{{"{name}": {number}}}'), name) == number
    with pytest.raises(ValidationError, match="valid number"):
        model(**{name: True})


def test_the_json_schema_of_a_number_field_is_its_bounds_as_before():
    prop = wire.AdamParams.model_json_schema()["properties"]["beta1"]["anyOf"][0]
    assert prop == {"type": "number", "minimum": 0, "exclusiveMaximum": 1}


class _Unchecked(BaseModel):
    """``wire.AdamParams``' first fields as they were: pydantic's strict float, bounds and all, no ``NUMBER_ONLY``."""

    learning_rate: Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)] | None = None
    beta1: Annotated[float, Strict(), Field(ge=0, lt=1, allow_inf_nan=False)] | None = None
    weight_decay: Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)] | None = None


def test_the_check_makes_no_python_call():
    """Wire models are built on hot paths (``tests/engine/test_step_calls.py``): the check is C's ``isinstance``,
    after which each field's bounds stay in C (put before them, pydantic checks them in a Python call each)."""
    fields = {"learning_rate": 1e-3, "beta1": 0.9, "weight_decay": 0.0}
    assert python_calls(lambda: wire.AdamParams(**fields)) == python_calls(lambda: _Unchecked(**fields))


def test_rlnbs_entry_points_take_numpy_and_0d_torch_scalars_as_their_numbers():
    assert wire.loss_config(
        "grpo", {"beta": np.float32(0.25), "clip_low_threshold": torch.tensor(0.5)}
    ).grpo_params == (wire.GrpoLossParams(beta=0.25, clip_low_threshold=0.5))
    assert rlnb.AdamParams(learning_rate=torch.tensor(0.5)).learning_rate == 0.5
    lora = wire.lora_config({"dropout": np.float32(0.25)})
    assert isinstance(lora, wire.LoraConfig) and lora.dropout == 0.25
    with pytest.raises(
        ValueError, match=r"loss_params.beta = tensor\(\[0.1000\]\) is invalid: must be a finite number"
    ):
        wire.loss_config("grpo", {"beta": torch.tensor([0.1])})
