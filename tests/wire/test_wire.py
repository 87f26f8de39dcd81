"""The wire models: int64 encoding, enums, lenient responses, strict requests."""

import json

import pytest

from rlnb import wire


def test_int64_accepts_strings_and_ints_server_emits_strings_client_sends_ints():
    assert wire.OptimStepResult(step="42").step == 42
    assert wire.OptimStepResult(step=42).model_dump(mode="json")["step"] == "42"  # a response (protobuf JSON)
    assert wire.OptimStepResult(step=42).to_json_dict() == {"step": 42}  # a request body, as the SDK sends it
    assert wire.EncodedText(tokens=["1", 2]).tokens == [1, 2]
    with pytest.raises(ValueError, match="step\n  Value error, expected an integer, got a bool"):
        wire.OptimStepResult(step=True)
    with pytest.raises(ValueError, match="expected an int64 \\(integer or decimal string\\), got '4.5'"):
        wire.OptimStepResult(step="4.5")
    with pytest.raises(ValueError, match="step\n  Input should be less than or equal to 9223372036854775807"):
        wire.OptimStepResult(step=2**63)


def test_operation_envelopes_from_the_reference():
    env = wire.Operation[wire.OptimStepResult].model_validate(
        {"id": "550e8400", "status": "TRAINING_OPERATION_STATUS_COMPLETED", "output": {"step": "42"}}
    )
    assert env.output.step == 42
    failed = wire.Operation[wire.OptimStepResult].model_validate(
        {
            "id": "x",
            "status": "TRAINING_OPERATION_STATUS_FAILED",
            "error": {"code": "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS", "message": "loss is NaN"},
        }
    )
    assert failed.error.code == "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS" and failed.output is None
    sample = wire.Operation[wire.SampleOutput].model_validate(
        {
            "id": "c3d4",
            "status": "TRAINING_OPERATION_STATUS_COMPLETED",
            "output": {
                "results": [
                    {
                        "policy_segments": [{"start_token": 0, "version": 42}],
                        "sequences": [
                            {
                                "tokens": ["1012", "318", "151645"],
                                "logprobs": [-0.5, -1.2, -0.3],
                                "stop_reason": "STOP_REASON_STOP",
                                "prompt_cache_hit_tokens": 0,
                            }
                        ],
                    }
                ]
            },
        }
    )
    assert sample.output.results[0].sequences[0].tokens == [1012, 318, 151645]


def test_responses_keep_unknown_fields():
    r = wire.WeightsSyncResult.model_validate({"weights_version": "3", "new_field": 1})
    assert r.weights_version == 3 and r.model_extra == {"new_field": 1}


def test_requests_reject_bad_enums_and_tensors():
    with pytest.raises(ValueError, match="weight_sync_type"):
        wire.WeightsSyncBody.model_validate({"weight_sync_type": "SOON"})
    with pytest.raises(ValueError, match="dtype"):
        wire.TensorData.model_validate({"data": [1], "dtype": "float64"})
    with pytest.raises(ValueError, match="shape"):
        wire.TensorData.model_validate({"data": [1, 2], "dtype": "int64", "shape": [3]})
    with pytest.raises(ValueError, match="sparse"):
        wire.TensorData.model_validate({"data": [1], "dtype": "int64", "sparse_col_indices": [0]})
    with pytest.raises(ValueError, match="topk_prompt_logprobs"):
        wire.SampleBody.model_validate({"model_inputs": [], "topk_prompt_logprobs": 21})
    with pytest.raises(ValueError, match="beta"):
        wire.LossConfig.model_validate({"type": "LOSS_TYPE_DRO", "dro_params": {}})


def test_reference_forward_backward_body_parses_and_round_trips():
    body = {
        "samples": [
            {
                "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                "loss_fn_inputs": {
                    "target_tokens": {"data": [456, 789, 1011], "dtype": "int64"},
                    "logprobs": {"data": [0.0, -1.1, -0.4], "dtype": "float32"},
                    "advantages": {"data": [0.0, 0.5, 0.5], "dtype": "float32"},
                    "mask": {"data": [0, 1, 1], "dtype": "int64"},
                },
            }
        ],
        "loss": {
            "type": "LOSS_TYPE_GRPO",
            "grpo_params": {
                "clip_low_threshold": 0.8,
                "clip_high_threshold": 1.2,
                "beta": 0.0,
                "agg_type": "GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON",
                "ratio_type": "GRPO_LOSS_RATIO_TYPE_TOKEN",
            },
        },
        "forward_only": False,
        "return_loss_fn_outputs": False,
    }
    parsed = wire.ForwardBackwardBody.model_validate(body)
    assert parsed.samples[0].model_input.tokens == [123, 456, 789]
    out = parsed.to_json_dict()
    assert out["loss"] == body["loss"]
    assert out["samples"][0]["model_input"]["chunks"][0]["encoded_text"]["tokens"] == [123, 456, 789]
    assert out["samples"][0]["loss_fn_inputs"]["mask"]["data"] == [0, 1, 1]


def test_every_kind_has_request_and_result_types():
    assert set(wire.REQUEST_TYPES) == set(wire.RESULT_TYPES)
    assert set(wire.OperationKind) == set(wire.RESULT_TYPES) == set(wire.ENVELOPES)


def test_a_failed_envelope_is_made_one_way_and_serialises_as_the_api_strings():
    env = wire.Operation.failed("op-1", wire.OperationErrorCode.TIMEOUT, "gave up")
    assert env.model_dump(mode="json") == {
        "id": "op-1",
        "status": "TRAINING_OPERATION_STATUS_FAILED",
        "output": None,
        "error": {"code": "TRAINING_OPERATION_ERROR_CODE_TIMEOUT", "message": "gave up"},
    }
    assert json.loads(env.model_dump_json())["status"] == "TRAINING_OPERATION_STATUS_FAILED"
    unknown = wire.Operation.failed("op-2", None, "the POST failed")
    assert unknown.error is not None and unknown.error.code is None
    typed = wire.ENVELOPES[wire.OperationKind.SAMPLE].model_validate(env.model_dump(mode="json"))
    assert typed.status is wire.OperationStatus.FAILED and typed.error == env.error


def test_catalogue_members_are_their_strings():
    """A member compares, hashes, formats and dumps as the API's string, and plain strings parse to members."""
    assert wire.OperationStatus.COMPLETED == "TRAINING_OPERATION_STATUS_COMPLETED"
    assert {"optim-step": 1}[wire.OperationKind.OPTIM_STEP] == 1
    assert f"{wire.OperationErrorCode.NON_FINITE_LOSS}" == "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"
    assert json.dumps([wire.OperationKind.SAMPLE]) == '["sample"]'
    env = wire.Operation.model_validate({"id": "x", "status": "TRAINING_OPERATION_STATUS_RUNNING"})
    assert env.status is wire.OperationStatus.RUNNING
    assert wire.error_code("INVALID_INPUT") is wire.OperationErrorCode.INVALID_INPUT
    assert wire.error_code("TRAINING_OPERATION_ERROR_CODE_TIMEOUT") is wire.OperationErrorCode.TIMEOUT
    with pytest.raises(ValueError, match="one of UNSPECIFIED, RESOURCE_EXHAUSTED"):
        wire.error_code("NOPE")
    assert wire.short_name(wire.SessionStatus.EXPIRED) == "EXPIRED"
    assert wire.short_name("TRAINING_OPERATION_ERROR_CODE_FROM_A_NEWER_SERVER") == "FROM_A_NEWER_SERVER"


def test_a_newer_enum_value_a_server_sent_dumps_as_it_came_without_a_warning(recwarn):
    """``model_dump()`` of a session whose status is newer than the list (kept by ``Newer``) warned "serialized value
    may not be as expected" from pydantic on every dump (a run's records, a notebook's display); the schemas are
    the list's all the same."""
    session = {
        "id": "s", "status": "TRAINING_SESSION_STATUS_HIBERNATING", "base_model": "m", "model_resources_id": "r",
        "created_by": "u", "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:00:00Z",
    }  # fmt: skip
    s = wire.Session.model_validate(session, context=wire.FROM_SERVER)
    assert s.model_dump()["status"] == s.model_dump(mode="json")["status"] == session["status"]
    assert json.loads(s.model_dump_json())["status"] == session["status"]
    known = s.model_copy(update={"status": wire.SessionStatus.RUNNING})
    assert known.model_dump()["status"] is wire.SessionStatus.RUNNING
    assert known.model_dump(mode="json")["status"] == "TRAINING_SESSION_STATUS_RUNNING"
    assert not [w for w in recwarn if "serialized value" in str(w.message)]
    statuses = [m.value for m in wire.SessionStatus]
    for mode in ("validation", "serialization"):
        schema = wire.Session.model_json_schema(mode=mode)
        assert schema["properties"]["status"] == {"$ref": "#/$defs/SessionStatus"}
        assert schema["$defs"]["SessionStatus"]["enum"] == statuses
