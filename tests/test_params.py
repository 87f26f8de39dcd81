"""AdamParams / MuonParams: every field, every bound, round trips, exact JSON bodies."""

import dataclasses
import math

import pytest

import rlnb
from rlnb import wire
from rlnb.params import ADAM_DEFAULTS, MUON_DEFAULTS, params_for, resolve

# (field, good values, bad values, words the message must contain)
ADAM_FIELDS = [
    ("learning_rate", [1e-6, 3.0], [0, -1e-4, math.nan, math.inf, "0.1"], "> 0"),
    ("beta1", [0.0, 0.9, 0.999], [1.0, -0.1, 1.5, math.nan], ">= 0 and < 1"),
    ("beta2", [0.0, 0.95], [1, -0.01, math.inf], ">= 0 and < 1"),
    ("eps", [1e-12, 1e-8], [0, -1e-8, math.nan], "> 0"),
    ("weight_decay", [0, 0.1, 2.0], [-0.1, math.inf, False], ">= 0"),
    ("grad_clip_norm", [0, 1.0, 10], [-1, math.nan], ">= 0"),
]
MUON_FIELDS = [
    ("learning_rate", [0.02], [0, -0.02, math.nan], "> 0"),
    ("momentum", [0.0, 0.95], [1.0, -0.5, math.inf], ">= 0 and < 1"),
    ("newton_schulz_steps", [1, 5, 20], [0, 21, 5.0, True, "5"], ">= 1 and <= 20"),
    ("weight_decay", [0, 0.01], [-1e-3], ">= 0"),
    ("grad_clip_norm", [0, 10], [-2], ">= 0"),
]


@pytest.mark.parametrize("cls,fields", [(rlnb.AdamParams, ADAM_FIELDS), (rlnb.MuonParams, MUON_FIELDS)])
def test_every_field_and_bound(cls, fields):
    for name, good, bad, words in fields:
        for value in good:
            assert getattr(cls(**{name: value}), name) == value
        for value in bad:
            with pytest.raises(rlnb.InvalidParams) as info:
                cls(**{name: value})
            msg = str(info.value)
            assert isinstance(info.value, ValueError)
            assert f"{cls.__name__}.{name} = {value!r}" in msg, msg
            assert words in msg, msg
            assert info.value.errors[0][0] == name


def test_unknown_field_rejected_with_the_allowed_names():
    with pytest.raises(
        rlnb.InvalidParams, match="lr = 0.1 is invalid: unknown field; allowed fields are learning_rate"
    ):
        rlnb.AdamParams(lr=0.1)
    with pytest.raises(ValueError, match="betas"):
        rlnb.MuonParams(betas=(0.9, 0.95))


def test_nested_adam_errors_name_the_full_path():
    with pytest.raises(rlnb.InvalidParams, match=r"MuonParams.adam.beta1 = 2 is invalid: .*>= 0 and < 1"):
        rlnb.MuonParams(adam={"beta1": 2})


def test_an_adam_that_is_no_params_says_what_it_takes_and_numpy_integers_are_integers():
    """``MuonParams(adam=5)`` said "must be a finite number"; ``adam=rlnb.wire.AdamParams(...)`` (the API's own
    type) was refused with the same words; ``newton_schulz_steps=np.int64(5)`` (``np.arange``'s) was
    "np.int64(5) is invalid: must be an integer", where numpy floats pass and rlnb takes numpy integers
    everywhere else."""
    np = pytest.importorskip("numpy")
    for bad in (5, "fast", rlnb.MuonParams()):
        with pytest.raises(
            rlnb.InvalidParams,
            match=r"MuonParams.adam = .* is invalid: must be AdamParams or a "
            r"dict of its fields \(learning_rate, beta1, ",
        ):
            rlnb.MuonParams(adam=bad)
    given = rlnb.MuonParams(adam=wire.AdamParams(learning_rate=1e-3))
    assert given.adam == rlnb.AdamParams(learning_rate=1e-3) and type(given.adam) is rlnb.AdamParams
    with pytest.raises(rlnb.InvalidParams, match="MuonParams.adam.lr = 1 is invalid: unknown field"):
        rlnb.MuonParams(adam=wire.AdamParams(lr=1))
    p = rlnb.MuonParams(newton_schulz_steps=np.int64(3), adam={"learning_rate": np.int64(1)})
    assert p.request_body() == {"muon_params": {"newton_schulz_steps": 3, "adam": {"learning_rate": 1.0}}}
    assert type(p.newton_schulz_steps) is int
    for bad in (np.int64(21), np.bool_(True), np.float64(5.0)):
        with pytest.raises(rlnb.InvalidParams, match="newton_schulz_steps"):
            rlnb.MuonParams(newton_schulz_steps=bad)


def test_assignment_is_validated_too():
    p = rlnb.AdamParams()
    with pytest.raises(ValueError, match="learning_rate"):
        p.learning_rate = -1.0


def test_an_assignment_is_checked_as_the_constructor_checks():
    """Assignments went through pydantic's own check: ``m.newton_schulz_steps = np.int64(5)`` was "Input should be
    a valid integer", ``m.adam = 5`` "Input should be a valid dictionary or instance of AdamParams", a pydantic
    ``ValidationError`` where the constructor raises ``InvalidParams`` naming the allowed range."""
    np = pytest.importorskip("numpy")
    m = rlnb.MuonParams()
    m.newton_schulz_steps = np.int64(3)
    m.adam = {"learning_rate": 1e-3}
    assert m.request_body() == {"muon_params": {"newton_schulz_steps": 3, "adam": {"learning_rate": 1e-3}}}
    assert type(m.adam) is rlnb.AdamParams and type(m.newton_schulz_steps) is int
    m.adam = wire.AdamParams(beta1=0.8)
    assert m.adam == rlnb.AdamParams(beta1=0.8)
    with pytest.raises(rlnb.InvalidParams, match="MuonParams.adam = 5 is invalid: must be AdamParams or a dict"):
        m.adam = 5
    with pytest.raises(rlnb.InvalidParams, match=r"MuonParams.adam.eps = 0 is invalid: .*> 0"):
        m.adam = {"eps": 0}
    with pytest.raises(rlnb.InvalidParams, match=r"MuonParams.newton_schulz_steps = 21 is invalid: .*<= 20"):
        m.newton_schulz_steps = np.int64(21)
    with pytest.raises(rlnb.InvalidParams, match=r"AdamParams.beta1 = 1.0 is invalid: .*>= 0 and < 1"):
        m.adam.beta1 = 1.0
    assert m.request_body() == {"muon_params": {"newton_schulz_steps": 3, "adam": {"beta1": 0.8}}}


def test_several_errors_reported_together():
    with pytest.raises(rlnb.InvalidParams) as info:
        rlnb.AdamParams(beta1=2, eps=0)
    assert [e[0] for e in info.value.errors] == ["beta1", "eps"]


def test_request_body_matches_the_reference_adam_example():
    p = rlnb.AdamParams(learning_rate=0.0001, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip_norm=10)
    assert p.request_body() == {
        "adam_params": {
            "learning_rate": 0.0001,
            "beta1": 0.9,
            "beta2": 0.95,
            "eps": 1e-8,
            "weight_decay": 0.1,
            "grad_clip_norm": 10,
        }
    }


def test_request_body_matches_the_reference_muon_example():
    adam = {
        "learning_rate": 0.0001,
        "beta1": 0.9,
        "beta2": 0.95,
        "eps": 1e-8,
        "weight_decay": 0.1,
        "grad_clip_norm": 10,
    }
    body = {
        "muon_params": {
            "learning_rate": 0.02,
            "momentum": 0.95,
            "newton_schulz_steps": 5,
            "weight_decay": 0,
            "grad_clip_norm": 10,
            "adam": adam,
        }
    }
    p = rlnb.MuonParams.from_dict(body)
    assert p.request_body() == body
    assert isinstance(p.adam, rlnb.AdamParams)
    assert p.request_body()["muon_params"]["newton_schulz_steps"] == 5
    assert isinstance(p.request_body()["muon_params"]["newton_schulz_steps"], int)


def test_unset_fields_are_omitted_and_zero_is_kept():
    assert rlnb.AdamParams().request_body() == {"adam_params": {}}
    assert rlnb.AdamParams(grad_clip_norm=0).request_body() == {"adam_params": {"grad_clip_norm": 0}}
    assert rlnb.MuonParams(learning_rate=0.01).request_body() == {"muon_params": {"learning_rate": 0.01}}


def _signs(body):
    """Each float of ``body`` (nested dicts walked) with its sign: ``0.0`` and ``-0.0`` compare equal."""
    return {k: _signs(v) if isinstance(v, dict) else (v, math.copysign(1, v)) for k, v in body.items()}


def test_a_negative_zero_is_zero_where_zero_is_allowed_in_bodies_and_recorded_params():
    """``AdamParams(weight_decay=-0.0)`` sent ``"weight_decay": -0.0``: a sign that means nothing in a field whose
    range starts at 0. It is 0.0 there, built, assigned, nested or read back; a field > 0 keeps -0.0 to refuse it."""
    np, torch = pytest.importorskip("numpy"), pytest.importorskip("torch")
    zero = (0.0, 1.0)
    p = rlnb.AdamParams(beta1=-0.0, weight_decay=np.float64(-0.0), grad_clip_norm=torch.tensor(-0.0))
    p.beta2 = -0.0
    assert _signs(p.request_body()["adam_params"]) == dict.fromkeys(
        ("beta1", "beta2", "weight_decay", "grad_clip_norm"), zero
    )
    assert _signs(p.model_dump(exclude_unset=True)) == _signs(p.request_body()["adam_params"])
    assert math.copysign(1, p.resolved().weight_decay) == 1.0
    m = rlnb.MuonParams(momentum=-0.0, weight_decay=-0.0, adam={"beta1": -0.0})
    assert _signs(m.request_body()["muon_params"]) == {"momentum": zero, "weight_decay": zero, "adam": {"beta1": zero}}
    back = rlnb.AdamParams.from_dict({"adam_params": {"weight_decay": -0.0}})
    assert _signs(back.request_body()["adam_params"]) == {"weight_decay": zero}
    with pytest.raises(rlnb.InvalidParams, match=r"learning_rate = -0.0 is invalid: must be a finite number, > 0"):
        rlnb.AdamParams(learning_rate=-0.0)


@pytest.mark.parametrize(
    "p",
    [
        rlnb.AdamParams(),
        rlnb.AdamParams(learning_rate=3e-4, grad_clip_norm=0),
        rlnb.MuonParams(momentum=0.9, newton_schulz_steps=3, adam=rlnb.AdamParams(eps=1e-10)),
    ],
)
def test_round_trip(p):
    again = type(p).from_dict(p.request_body())
    assert again == p
    assert again.request_body() == p.request_body()
    assert type(p).from_dict(p.request_body()[p._body_key]) == p


def test_a_copy_with_updates_is_checked_as_the_constructor_checks():
    """pydantic's ``model_copy(update=...)`` takes its values unchecked: ``base.model_copy(update={"learning_rate":
    -1e-3})`` went to a local session's optimizer as it was (a step up the loss), a misspelt ``lr`` was dropped."""
    base = rlnb.AdamParams(learning_rate=1e-3, beta1=0.8)
    with pytest.raises(rlnb.InvalidParams, match=r"AdamParams.learning_rate = -0.001 is invalid: .*> 0"):
        base.model_copy(update={"learning_rate": -1e-3})
    with pytest.raises(rlnb.InvalidParams, match="AdamParams.lr = 0.001 is invalid: unknown field"):
        base.model_copy(update={"lr": 1e-3})
    with pytest.raises(rlnb.InvalidParams, match=r"MuonParams.adam.eps = 0 is invalid"):
        rlnb.MuonParams(momentum=0.9).model_copy(update={"adam": {"eps": 0}})
    assert base.model_copy(update={"learning_rate": 3e-3}).request_body() == {
        "adam_params": {"learning_rate": 3e-3, "beta1": 0.8}
    }
    assert base.model_copy() == base and base.model_copy(deep=True) == base


def test_a_dict_holds_its_own_optimizers_params_and_nothing_beside_them():
    """``optim_step({"adam_params": {...}, "learning_rate": 1e-3})`` dropped the learning rate, and a dict
    with both optimizers' params the other's (``rlnb serve`` fails such a step naming both); a Muon session
    given ``{"adam_params": ...}`` called it an unknown Muon field; ``{"adam_params": None}`` (null: unset on
    the wire) was ``TypeError: argument after ** must be a mapping``."""
    with pytest.raises(
        rlnb.InvalidParams,
        match="learning_rate = 0.001 is invalid: an optim-step body holds "
        "adam_params only; put its fields inside adam_params",
    ):
        params_for("adam", {"adam_params": {"beta1": 0.8}, "learning_rate": 1e-3})
    with pytest.raises(TypeError, match="this session's optimizer is adam: send adam_params only, not muon_params"):
        params_for("adam", {"adam_params": {}, "muon_params": {"learning_rate": 0.02}})
    with pytest.raises(TypeError, match="this session's optimizer is muon: send muon_params only, not adam_params"):
        params_for("muon", {"adam_params": {"learning_rate": 1e-3}})
    with pytest.raises(rlnb.InvalidParams, match="adam_params = 5 is invalid: must be a dict of AdamParams fields"):
        params_for("adam", {"adam_params": 5})
    assert params_for("adam", {"adam_params": None}) == rlnb.AdamParams()
    assert params_for("muon", {"muon_params": {"momentum": 0.9}}) == rlnb.MuonParams(momentum=0.9)
    assert params_for("adam", {"beta1": 0.8}) == rlnb.AdamParams(beta1=0.8)  # the inner object alone


def test_body_parses_as_the_wire_optim_step_body():
    p = rlnb.MuonParams(learning_rate=0.01, adam={"learning_rate": 1e-3})
    body = wire.OptimStepBody.model_validate(p.request_body())
    assert body.muon_params.adam.learning_rate == 1e-3
    assert body.to_json_dict() == p.request_body()


def test_resolved_fills_documented_defaults():
    assert dataclasses.asdict(rlnb.AdamParams().resolved()) == ADAM_DEFAULTS
    assert ADAM_DEFAULTS == {
        "learning_rate": 1e-4,
        "beta1": 0.9,
        "beta2": 0.95,
        "eps": 1e-8,
        "weight_decay": 0.1,
        "grad_clip_norm": 1.0,
    }
    assert MUON_DEFAULTS == {
        "learning_rate": 0.02,
        "momentum": 0.95,
        "newton_schulz_steps": 5,
        "weight_decay": 0.0,
        "grad_clip_norm": 1.0,
    }
    r = rlnb.MuonParams(learning_rate=0.05, adam={"learning_rate": 3e-4}).resolved()
    assert r.learning_rate == 0.05 and r.momentum == 0.95 and r.newton_schulz_steps == 5
    assert dataclasses.asdict(r.adam) == {**ADAM_DEFAULTS, "learning_rate": 3e-4}
    assert rlnb.AdamParams(grad_clip_norm=0).resolved().grad_clip_norm == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.learning_rate = 1.0  # type: ignore[misc]


def test_none_is_unset_when_resolving():
    """``learning_rate=None`` (or ``null`` in a request body) means the default, never a rate of None."""
    assert rlnb.AdamParams(learning_rate=None).resolved().learning_rate == ADAM_DEFAULTS["learning_rate"]
    r = rlnb.MuonParams(momentum=None, adam=None).resolved()
    assert r.momentum == MUON_DEFAULTS["momentum"] and r.adam == rlnb.AdamParams().resolved()
    body = wire.OptimStepBody.model_validate({"muon_params": {"learning_rate": None, "adam": {"eps": None}}})
    assert resolve("muon", body) == rlnb.MuonParams().resolved()


def test_resolving_a_body_takes_the_sessions_own_kind_only():
    assert resolve("adam", wire.OptimStepBody()) == rlnb.AdamParams().resolved()
    assert resolve("adam", wire.OptimStepBody(adam_params={"beta1": 0.5})).beta1 == 0.5
    with pytest.raises(ValueError, match="this session's optimizer is adam: send adam_params, not muon_params"):
        resolve("adam", wire.OptimStepBody(muon_params={}))


def test_server_side_wire_model_enforces_the_same_bounds():
    with pytest.raises(ValueError, match="beta1"):
        wire.OptimStepBody.model_validate({"adam_params": {"beta1": 1.0}})
    with pytest.raises(ValueError, match="newton_schulz_steps"):
        wire.OptimStepBody.model_validate({"muon_params": {"newton_schulz_steps": 2.5}})


def test_scaled_multiplies_the_effective_learning_rates():
    assert rlnb.AdamParams(learning_rate=1e-3, beta1=0.8).scaled(0.5).model_dump(exclude_unset=True) == {
        "learning_rate": 5e-4,
        "beta1": 0.8,
    }
    assert rlnb.AdamParams().scaled(2.0).learning_rate == 2 * ADAM_DEFAULTS["learning_rate"]
    m = rlnb.MuonParams(momentum=0.9).scaled(0.1)
    assert m.learning_rate == pytest.approx(0.1 * MUON_DEFAULTS["learning_rate"]) and m.momentum == 0.9
    assert m.adam.learning_rate == pytest.approx(0.1 * ADAM_DEFAULTS["learning_rate"])


@pytest.mark.parametrize(
    ("factor", "error"),
    [("2", TypeError), (None, TypeError), (True, TypeError), (math.nan, ValueError), (math.inf, ValueError),
     (0, ValueError), (-0.5, ValueError), (10**400, ValueError)],
)  # fmt: skip
def test_scaled_refuses_a_factor_that_is_no_multiplier_naming_it(factor, error):
    """``scaled("2")`` was Python's "can't multiply sequence by non-int of type 'float'"; NaN, 0 or -0.5 an error
    about ``learning_rate`` the user never set; 10**400 a bare OverflowError."""
    with pytest.raises(error, match=r"^scaled: factor must be a finite number > 0 \(a schedule's multiplier\)"):
        rlnb.MuonParams().scaled(factor)


def test_scaled_takes_a_numpy_or_torch_factor():
    np, torch = pytest.importorskip("numpy"), pytest.importorskip("torch")
    for factor in (np.float32(0.5), torch.tensor(0.5), np.float64(0.5)):
        assert rlnb.AdamParams(learning_rate=1e-3).scaled(factor).learning_rate == 5e-4
    with pytest.raises(TypeError, match=r"^scaled: factor must be a finite number > 0 .*, got True"):
        rlnb.AdamParams().scaled(np.True_)


@pytest.mark.parametrize("data", [None, [("learning_rate", 1e-3)], "adam_params", 5])
def test_from_dict_of_what_is_no_dict_is_a_type_error_naming_it(data):
    """``from_dict(None)`` was "rlnb.AdamParams() argument after ** must be a mapping, not NoneType"."""
    with pytest.raises(TypeError, match=r"^AdamParams.from_dict takes a dict \(request_body\(\) or its inner object\)"):
        rlnb.AdamParams.from_dict(data)


def test_numpy_and_torch_bools_are_refused_as_python_bools_are():
    """``AdamParams(weight_decay=np.True_)`` (a numpy comparison, a DataFrame cell) was weight decay 1.0, and
    ``beta1=torch.tensor(False)`` 0.0, where ``True`` is refused; a torch integer (``torch.tensor(3)``) is an
    integer as a numpy one is."""
    np, torch = pytest.importorskip("numpy"), pytest.importorskip("torch")
    for bad in (np.True_, np.False_, torch.tensor(True)):
        with pytest.raises(rlnb.InvalidParams, match=r"AdamParams.weight_decay = (True|False) is invalid: must be a"):
            rlnb.AdamParams(weight_decay=bad)
        with pytest.raises(rlnb.InvalidParams, match=r"MuonParams.adam.beta1 = (True|False) is invalid"):
            rlnb.MuonParams(adam={"beta1": bad})
        p = rlnb.AdamParams()
        with pytest.raises(rlnb.InvalidParams, match=r"AdamParams.learning_rate = (True|False) is invalid"):
            p.learning_rate = bad
    p = rlnb.MuonParams(newton_schulz_steps=torch.tensor(3), learning_rate=torch.tensor(0.5))
    assert p.request_body() == {"muon_params": {"newton_schulz_steps": 3, "learning_rate": 0.5}}


def test_none_is_unset_in_every_body_a_params_makes():
    """docs/optimizers.md: "None counts as unset": no body carries a null (the remote client sent them to Together)."""
    from rlnb.session.bodies import optim_step_body

    adam = rlnb.AdamParams(learning_rate=None, beta1=0.5)
    assert adam.request_body() == {"adam_params": {"beta1": 0.5}}
    assert optim_step_body(adam).to_json_dict() == {"adam_params": {"beta1": 0.5}}
    assert rlnb.MuonParams(adam=None, momentum=None).request_body() == {"muon_params": {}}
    assert rlnb.MuonParams(adam={"eps": None}).request_body() == {"muon_params": {"adam": {}}}
    assert "None" not in str(adam.scaled(2).request_body())
    assert rlnb.AdamParams.from_dict({"adam_params": {"eps": None}}).request_body() == {"adam_params": {}}
    adam.beta1 = None
    assert adam.request_body() == {"adam_params": {}}


def test_model_validate_goes_the_constructors_way():
    """pydantic's ``model_validate`` (and ``_json``, ``_strings``) calls the constructor but wrapped its
    ``InvalidParams`` in a ``ValidationError``, which ``except rlnb.InvalidParams`` missed; ``None`` stays unset."""
    adam, muon = rlnb.AdamParams, rlnb.MuonParams
    assert adam.model_validate({"learning_rate": None, "beta1": 0.5}).request_body() == {"adam_params": {"beta1": 0.5}}
    assert adam.model_validate({"learning_rate": None}).resolved() == adam().resolved()  # None: the default, not null
    assert adam.model_validate_json('{"learning_rate": null}').request_body() == {"adam_params": {}}
    got = muon.model_validate({"learning_rate": None, "adam": {"eps": None, "beta2": 0.9}})
    assert got.request_body() == {"muon_params": {"adam": {"beta2": 0.9}}}
    with pytest.raises(rlnb.InvalidParams, match=r"^AdamParams.learning_rate = -1 is invalid: .*> 0"):
        adam.model_validate({"learning_rate": -1})
    with pytest.raises(rlnb.InvalidParams, match=r"^MuonParams.adam.eps = 0 is invalid"):
        muon.model_validate({"adam": {"eps": 0}})
    with pytest.raises(rlnb.InvalidParams, match=r"^AdamParams.lr = 1 is invalid: unknown field"):
        adam.model_validate_json('{"lr": 1}')
    with pytest.raises(rlnb.InvalidParams, match=r"^AdamParams.learning_rate = '0.1' is invalid"):
        adam.model_validate_strings({"learning_rate": "0.1"})  # a string is no number here, as for the constructor
    for wrong in (None, [1], adam()):
        with pytest.raises(TypeError, match=r"^MuonParams takes a dict of its fields, got "):
            muon.model_validate(wrong)
    with pytest.raises(ValueError, match=r"^AdamParams: Invalid JSON"):
        adam.model_validate_json("{bad")


def test_a_decay_that_would_erase_the_weights_is_refused_naming_both_fields():
    """Decoupled weight decay multiplies every weight by 1 - learning_rate * weight_decay each step: at 1 a step
    erased the weights, past it flipped their signs, in silence. Refused wherever params are built (the default decay
    counts: Adam's 0.1 at lr 20), an assignment left as it was; a schedule only scales rates down (multiplier <= 1)."""
    rule = r"is invalid: learning_rate \* weight_decay must be < 1, got "
    with pytest.raises(rlnb.InvalidParams, match=r"^AdamParams.weight_decay = 0.1 " + rule + r"20 \* 0.1 = 2: "):
        rlnb.AdamParams(learning_rate=20)
    with pytest.raises(rlnb.InvalidParams, match=r"^MuonParams.weight_decay = 1.0 " + rule + r"1 \* 1 = 1: "):
        rlnb.MuonParams(learning_rate=1, weight_decay=1.0)
    with pytest.raises(rlnb.InvalidParams, match=r"^MuonParams.adam.weight_decay = 0.1 " + rule):
        rlnb.MuonParams(adam={"learning_rate": 10})
    with pytest.raises(rlnb.InvalidParams, match=r"^AdamParams.scaled.factor = 2000 .*\(AdamParams.weight_decay = 0.5 "
                       + rule + r"2 \* 0.5 = 1"):  # fmt: skip
        rlnb.AdamParams(learning_rate=1e-3, weight_decay=0.5).scaled(2000)
    with pytest.raises(rlnb.InvalidParams, match=rule):
        rlnb.AdamParams(weight_decay=0.5).model_copy(update={"learning_rate": 2.0})
    with pytest.raises(rlnb.InvalidParams, match=rule):
        rlnb.AdamParams.from_dict({"adam_params": {"learning_rate": 5.0, "weight_decay": 0.5}})
    p = rlnb.AdamParams(learning_rate=1.0)
    with pytest.raises(rlnb.InvalidParams, match=r"^AdamParams.weight_decay = 1.0 " + rule):
        p.weight_decay = 1.0
    assert p.request_body() == {"adam_params": {"learning_rate": 1.0}}  # as it was: weight_decay still unset
    m = rlnb.MuonParams(weight_decay=0.5)
    with pytest.raises(rlnb.InvalidParams, match=r"^MuonParams.weight_decay = 0.5 " + rule):
        m.learning_rate = 4.0
    assert m.request_body() == {"muon_params": {"weight_decay": 0.5}}
    assert rlnb.AdamParams(learning_rate=9.99, weight_decay=0.1).resolved().learning_rate == 9.99  # just under 1


def test_an_unknown_attribute_lists_the_fields_and_an_array_is_no_number():
    """``p.lr = 2`` said "invalid: no_such_attribute"; ``torch.tensor([0.1])`` was taken as 0.1 (numpy's refused)."""
    import numpy as np
    import torch

    p = rlnb.AdamParams()
    with pytest.raises(ValueError, match="AdamParams.lr = 2 is invalid: unknown field; allowed fields are learning_"):
        p.lr = 2
    for array in (torch.tensor([0.1]), np.array([0.1]), torch.tensor([[0.1]])):
        with pytest.raises(ValueError, match=r"learning_rate = .* is invalid: must be a finite number, > 0"):
            rlnb.AdamParams(learning_rate=array)
        with pytest.raises(ValueError, match=r"eps = .* is invalid: must be a finite number, > 0"):
            p.eps = array
        with pytest.raises(ValueError, match=r"^MuonParams.adam.learning_rate = .* is invalid: must be a finite num"):
            rlnb.MuonParams(adam={"learning_rate": array})  # guard: one array check (wire.arrays) for both levels
    assert rlnb.AdamParams(learning_rate=torch.tensor(0.5)).learning_rate == 0.5  # a 0-d tensor is its number


def test_a_loss_name_missing_its_params_or_given_params_it_has_no_field_for_says_so():
    """``loss="dro"`` without params was pydantic's bare "Field required" (its dict form got the friendly message),
    and cross-entropy with params said "its fields: " followed by nothing."""
    from rlnb.wire.losses import loss_config

    with pytest.raises(ValueError, match=r"loss.dro_params is required for LOSS_TYPE_DRO \(beta: no default\)"):
        loss_config("dro")
    with pytest.raises(ValueError, match=r"loss.dro_params is required for LOSS_TYPE_DRO \(beta: no default\)"):
        loss_config("dro", {})
    assert loss_config("dro", {"beta": 0.1}).dro_params is not None
    with pytest.raises(ValueError, match="cross_entropy params have no field 'x'; its fields: none, it takes no par"):
        loss_config("cross_entropy", {"x": 1})


def test_a_muon_adam_clip_the_step_would_not_use_is_refused_naming_it():
    """A Muon step clips one global norm, by Muon's own grad_clip_norm: ``adam.grad_clip_norm`` was taken and never
    read, so ``adam=AdamParams(grad_clip_norm=0.01)`` clipped nothing. Another value is refused wherever params are
    built (an assignment left as it was); the same one, or none, is taken."""
    said = r"\.adam\.grad_clip_norm = {} is invalid: must be unset or equal to grad_clip_norm \({}\): a Muon step clips"
    with pytest.raises(rlnb.InvalidParams, match=r"^MuonParams" + said.format(r"0\.01", 1)):
        rlnb.MuonParams(adam=rlnb.AdamParams(grad_clip_norm=0.01))
    with pytest.raises(rlnb.InvalidParams, match=r"^MuonParams" + said.format(r"1\.0", 0)):
        rlnb.MuonParams.from_dict({"muon_params": {"grad_clip_norm": 0, "adam": {"grad_clip_norm": 1.0}}})
    p = rlnb.MuonParams(adam={"grad_clip_norm": 1.0})  # Muon's default clip: the same
    assert p.resolved().grad_clip_norm == p.resolved().adam.grad_clip_norm == 1.0
    with pytest.raises(rlnb.InvalidParams, match=r"^MuonParams" + said.format(r"1\.0", 2)):
        p.grad_clip_norm = 2.0
    assert p.request_body() == {"muon_params": {"adam": {"grad_clip_norm": 1.0}}}
    both = rlnb.MuonParams(grad_clip_norm=0.5, adam=rlnb.AdamParams(learning_rate=1e-3, grad_clip_norm=0.5))
    assert both.scaled(0.5).resolved().adam.grad_clip_norm == 0.5
    adam = wire.AdamParams(grad_clip_norm=3.0)
    body = wire.OptimStepBody(muon_params=wire.MuonParams(grad_clip_norm=2.0, adam=adam))
    with pytest.raises(rlnb.InvalidParams, match=r"^muon_params" + said.format(r"3\.0", 2)):
        resolve("muon", body)


def test_deleting_a_field_unsets_it():
    """``del p.learning_rate`` (to go back to the default) left params without the attribute: reading it raised
    ``AttributeError`` and the repr lost the field, while the body and ``resolved()`` went on without it."""
    p = rlnb.AdamParams(learning_rate=1e-3, weight_decay=0.0)
    del p.learning_rate
    assert p.learning_rate is None and p.request_body() == {"adam_params": {"weight_decay": 0.0}}
    assert "learning_rate=None" in repr(p) and p.resolved().learning_rate == ADAM_DEFAULTS["learning_rate"]
    m = rlnb.MuonParams(learning_rate=0.01, adam={"learning_rate": 1e-3})
    del m.adam
    assert m.adam is None and m.request_body() == {"muon_params": {"learning_rate": 0.01}}
    assert params_for("muon", m).request_body() == m.request_body()  # a session's copy, as checked
    with pytest.raises(AttributeError):
        del p.lr


def test_kind_of_names_the_optimizer_a_params_object_is_for():
    """Five sweep modules wrote ``"adam" if isinstance(p, AdamParams) else "muon"``: a third kind would have been
    "muon"; ``kind_of`` reads ``PARAMS``, and refuses what is no params object, naming it."""
    from rlnb.params import PARAMS, kind_of

    assert [kind_of(PARAMS[kind]()) for kind in wire.OPTIMIZERS] == list(wire.OPTIMIZERS)
    with pytest.raises(TypeError, match=r"^params must be AdamParams or MuonParams, got dict$"):
        kind_of({"learning_rate": 1e-3})
