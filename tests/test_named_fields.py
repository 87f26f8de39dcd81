"""Inputs of the wrong kind are refused in one line naming the argument (``samples[1]``, ``loss_params``,
``model_options``, ``model``), before anything is sent: pydantic's and dataclasses' own errors named none of them."""

from __future__ import annotations

import math
import re

import pytest

import rlnb
from rlnb import samples, wire
from rlnb.engine.backend import LocalBackend
from rlnb.testing import FakeBackend

CE = samples.cross_entropy([1, 2, 3])


def nan_weights() -> dict:
    sample = CE.model_dump()
    sample["loss_fn_inputs"]["weights"]["data"][0] = math.nan
    return sample


def float_token() -> wire.Sample:
    """A ``Sample`` whose token is set to 1.5 after it was built (pydantic checks a list once)."""
    sample = samples.cross_entropy([1, 2, 3])
    sample.model_input.chunks[0].encoded_text.tokens[1] = 1.5
    return sample


@pytest.mark.parametrize(
    ("given", "words"),
    [
        (CE, r"^samples must be a list of samples, such as \[rlnb\.samples\.cross_entropy\(\.\.\.\)\], got one sample: "
             r"pass \[sample\]$"),
        (CE.model_dump(), r"samples must be a list of samples, .* got one sample: pass \[sample\]$"),
        ("abc", r"samples must be a list of samples, .* got 'abc'$"),
        ([CE, None], r"^samples\[1\] must be a Sample \(rlnb.samples.cross_entropy\(...\), .policy\(...\)\) or "
                     r"its dict, got None$"),
        ([CE, CE, 5], r"^samples\[2\] must be a Sample .* got 5$"),
        ([nan_weights()], r"^samples\[0\].loss_fn_inputs.weights: tensor data must be finite"),
        ([float_token()], r"^samples\[0\]\.model_input\.chunks\[0\]\.encoded_text\.tokens\[1\]: expected an integer, "
                          r"got 1\.5$"),
    ],
    ids=["one Sample", "one dict", "text", "None", "int", "dict with NaN", "Sample edited to a float token"],
)  # fmt: skip
def test_samples_that_are_no_list_of_samples_are_named(given, words):
    """One ``Sample`` alone was "Input should be a valid dictionary or instance of Sample [input_value=('model_input',
    ...), input_type=tuple]" (read as a list of its fields); ``[sample, None]`` did not say which."""
    with rlnb.Session(FakeBackend(), record=False) as s:
        with pytest.raises(ValueError, match=words):
            s.forward_backward(given)
        assert s.backend.submitted == []  # nothing was sent
        assert s.forward_backward([CE, CE.model_dump()]).result(timeout=30).loss is not None  # both forms are taken


@pytest.mark.parametrize("params", [[1, 2], "beta", 0.1])
def test_loss_params_that_are_no_dict_are_named(params):
    """``loss_params=[1, 2]`` was "ppo params have no field 1, 2"."""
    said = f"loss_params must be a dict of the loss's params, such as {{'beta': 0.1}}, got {params!r}"
    words = "^" + re.escape(said) + "$"
    with pytest.raises(ValueError, match=words):
        wire.loss_config("ppo", params)
    with pytest.raises(ValueError, match=words):
        wire.loss_config(wire.LossConfig(type="LOSS_TYPE_PPO"), params)


@pytest.mark.parametrize("optimizer", ["adam", "muon"])
def test_resolved_hyperparams_are_not_called_the_other_optimizer(optimizer):
    """``optim_step(AdamParams().resolved())`` on an Adam session said "pass AdamParams, not AdamHyperparams (the
    optimizer is fixed when the session is created)": an optimizer mismatch that was not there."""
    params = rlnb.AdamParams() if optimizer == "adam" else rlnb.MuonParams()
    name = type(params).__name__
    words = (
        rf"^params must be {name} \(or a dict of its fields\), not {name[:-6]}Hyperparams, which \.resolved\(\) "
        rf"gives for reading: pass the {name} it came from$"
    )
    with rlnb.Session(FakeBackend(optimizer), record=False) as s:
        with pytest.raises(TypeError, match=words):
            s.optim_step(params.resolved())
        with pytest.raises(TypeError, match="the optimizer is fixed when the session is created"):  # a real mismatch
            s.optim_step(rlnb.MuonParams() if optimizer == "adam" else rlnb.AdamParams())


@pytest.mark.parametrize("optimizer", ["adam", "muon"])
def test_the_wires_params_class_is_named_apart_from_rlnbs(optimizer):
    """``optim_step(rlnb.wire.AdamParams(...))`` on an Adam session said "this session's optimizer is adam: pass
    AdamParams, not AdamParams (the optimizer is fixed ...)": the optimizer was right, the class was the wire's."""
    name = "AdamParams" if optimizer == "adam" else "MuonParams"
    words = rf"^params must be rlnb\.{name} \(or a dict of its fields\), not rlnb\.wire\.{name}, the body the wire"
    with rlnb.Session(FakeBackend(optimizer), record=False) as s:
        with pytest.raises(TypeError, match=words):
            s.optim_step(getattr(wire, name)(learning_rate=1e-3))
        with pytest.raises(TypeError, match="the optimizer is fixed when the session is created"):  # a real mismatch
            s.optim_step(wire.MuonParams() if optimizer == "adam" else wire.AdamParams())


@pytest.mark.parametrize("extra", [{}, {"seed": 1}])
def test_an_option_group_given_as_a_dict_is_named(extra):
    """``connect(model_options={"device": "cpu"})`` was "'dict' object has no attribute 'device'", or with a flat
    keyword beside it "replace() should be called on dataclass instances"."""
    words = (
        r"^model_options must be a ModelOptions or None, got \{'device': 'cpu'\}; give ModelOptions\(...\) or its "
        r"fields as keywords \(tokenizer, seed, "
    )
    with pytest.raises(TypeError, match=words):
        LocalBackend("adam", "/no/such/model/folder", model_options={"device": "cpu"}, **extra)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^compute_options must be a ComputeOptions or None, got 2; "):
        rlnb.connect("local", model="/no/such/model/folder", compute_options=2)


@pytest.mark.parametrize("model", ["", "  ", 5])
def test_an_empty_model_name_is_refused_not_read_as_the_working_folder(model):
    """``connect("local", model="")`` loaded the working folder: "'' is a directory but holds no config.json"."""
    words = rf"^model must be 'tiny', 'small', a Hugging Face directory or hub id, or an nn.Module; got {model!r}$"
    with pytest.raises(ValueError, match=words):
        rlnb.connect("local", model=model, device="cpu", record=False)
