"""Short names of the wire's enums where a user types them: GRPO's aggregation and ratio in ``loss_params``
(docs/losses.md names them FIXED_HORIZON / TOKEN_MEAN / SEQUENCE_MEAN, TOKEN / SEQUENCE) and weights-sync's type."""

from __future__ import annotations

import re

import pytest

import rlnb
from rlnb import samples, wire
from rlnb.session.bodies import weights_sync_body
from rlnb.testing import FakeBackend


@pytest.mark.parametrize(
    ("short", "field", "value"),
    [("TOKEN_MEAN", "agg_type", "GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN"),
     ("sequence_mean", "agg_type", "GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN"),
     ("Fixed_Horizon", "agg_type", "GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON"),
     ("sequence", "ratio_type", "GRPO_LOSS_RATIO_TYPE_SEQUENCE"),
     ("GRPO_LOSS_RATIO_TYPE_TOKEN", "ratio_type", "GRPO_LOSS_RATIO_TYPE_TOKEN"),
     ("GRPO_LOSS_AGGREGATION_TYPE_UNSPECIFIED", "agg_type", "GRPO_LOSS_AGGREGATION_TYPE_UNSPECIFIED")],
)  # fmt: skip
def test_grpo_params_take_the_names_the_docs_give_and_send_the_wire_value(short, field, value):
    """``loss_params={"agg_type": "TOKEN_MEAN"}`` was a raw multi-line pydantic literal_error."""
    config = wire.loss_config("grpo", {field: short})
    assert getattr(config.grpo_params, field) == value
    assert config.to_json_dict()["grpo_params"] == {field: value}  # what a remote session sends


@pytest.mark.parametrize("bad", ["mean", "", 3, ["TOKEN_MEAN"]])
def test_a_grpo_aggregation_that_is_no_name_is_one_line_listing_the_names(bad):
    words = (
        r"^loss_params agg_type must be one of FIXED_HORIZON, TOKEN_MEAN, SEQUENCE_MEAN \(or its wire name, "
        r"such as 'GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON'\), got " + re.escape(repr(bad)) + "$"
    )
    with pytest.raises(ValueError, match=words):
        wire.loss_config("grpo", {"agg_type": bad})
    with pytest.raises(ValueError, match=r"^loss_params ratio_type must be one of TOKEN, SEQUENCE "):
        wire.loss_config("grpo", {"ratio_type": "GSPO"})


def test_a_short_aggregation_name_trains_as_its_wire_value():
    """The name reaches the loss: TOKEN_MEAN's loss is the token sum's mean, not FIXED_HORIZON's sum / (n·H)."""
    batch = [samples.policy([1, 2, 3], [4, 5], [-1.0, -2.0], 1.0), samples.policy([6], [7, 8, 9], [-1.0] * 3, -0.5)]
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:

        def loss(agg: str) -> float:
            return s.forward_backward(batch, "grpo", {"agg_type": agg}, forward_only=True).result(timeout=60).loss

        by_name = loss("token_mean")
        assert by_name == loss("GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN")
        assert by_name != pytest.approx(loss("FIXED_HORIZON"))


def test_a_weights_sync_type_that_is_no_name_lists_the_short_names():
    """Its error listed only the ``WEIGHT_SYNC_TYPE_*`` spellings, not the short names ``weights_sync`` takes."""
    assert weights_sync_body("pipeline").weight_sync_type == "WEIGHT_SYNC_TYPE_PIPELINE"
    assert weights_sync_body("WEIGHT_SYNC_TYPE_PIPELINE").weight_sync_type == "WEIGHT_SYNC_TYPE_PIPELINE"
    words = (
        r"^sync_type must be one of synchronous, background_publish, pipeline \(or its wire name, such as "
        r"'WEIGHT_SYNC_TYPE_SYNCHRONOUS'\), got 'PIPELINE'$"
    )
    with rlnb.Session(FakeBackend(), record=False) as s, pytest.raises(ValueError, match=words):
        s.weights_sync("PIPELINE")
    with pytest.raises(ValueError, match=r"got \['pipeline'\]$"):
        weights_sync_body(["pipeline"])  # type: ignore[arg-type]
