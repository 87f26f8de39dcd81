# Adapted from together 3.1.1's sdist (tests/api_resources/post_training/test_operations.py, "generated from our
# OpenAPI spec by Stainless", Apache-2.0): the assertions are unchanged; placeholder ids are live objects of
# a real `rlnb serve` (the `live` fixture, tests/server/sdk_generated/conftest.py lists every replacement).

from __future__ import annotations

from typing import Any, cast

import pytest
from together import AsyncTogether, Together
from together.types.post_training import (
    CustomForwardBackwardOperation,
    ForwardBackwardOperation,
    InferenceCheckpointOperation,
    OptimStepOperation,
    SampleOperation,
    TrainingCheckpointOperation,
    WeightsSyncOperation,
)

from tests.server.sdk_generated.conftest import Live
from tests.server.sdk_generated.utils import assert_matches_type


class TestOperations:
    parametrize = pytest.mark.parametrize("client", [False, True], indirect=True, ids=["loose", "strict"])

    @parametrize
    def test_method_create_inference_checkpoint(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.create_inference_checkpoint(
            session_id=live.session_id,
            idempotency_key=live.key(),
        )
        assert_matches_type(InferenceCheckpointOperation, operation, path=["response"])

    @parametrize
    def test_raw_response_create_inference_checkpoint(self, client: Together, live: Live) -> None:
        response = client.post_training.operations.with_raw_response.create_inference_checkpoint(
            session_id=live.session_id,
            idempotency_key=live.key(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = response.parse()
        assert_matches_type(InferenceCheckpointOperation, operation, path=["response"])

    @parametrize
    def test_streaming_response_create_inference_checkpoint(self, client: Together, live: Live) -> None:
        with client.post_training.operations.with_streaming_response.create_inference_checkpoint(
            session_id=live.session_id,
            idempotency_key=live.key(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = response.parse()
            assert_matches_type(InferenceCheckpointOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_create_inference_checkpoint(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.operations.with_raw_response.create_inference_checkpoint(
                session_id="",
                idempotency_key=live.key(),
            )

    @parametrize
    def test_method_create_training_checkpoint(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.create_training_checkpoint(
            session_id=live.session_id,
            idempotency_key=live.key(),
        )
        assert_matches_type(TrainingCheckpointOperation, operation, path=["response"])

    @parametrize
    def test_raw_response_create_training_checkpoint(self, client: Together, live: Live) -> None:
        response = client.post_training.operations.with_raw_response.create_training_checkpoint(
            session_id=live.session_id,
            idempotency_key=live.key(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = response.parse()
        assert_matches_type(TrainingCheckpointOperation, operation, path=["response"])

    @parametrize
    def test_streaming_response_create_training_checkpoint(self, client: Together, live: Live) -> None:
        with client.post_training.operations.with_streaming_response.create_training_checkpoint(
            session_id=live.session_id,
            idempotency_key=live.key(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = response.parse()
            assert_matches_type(TrainingCheckpointOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_create_training_checkpoint(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.operations.with_raw_response.create_training_checkpoint(
                session_id="",
                idempotency_key=live.key(),
            )

    @parametrize
    def test_method_custom_forward_backward(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.custom_forward_backward(
            session_id=live.session_id,
            gradients=[{"data": [-0.1, 0.05, -0.08, 0.12, -0.03]}],
            samples=[
                {
                    "loss_fn_inputs": {
                        "target_tokens": {
                            "data": [1, 2, 3],
                            "dtype": "int64",
                        }
                    },
                    "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                }
            ],
            idempotency_key=live.key(),
        )
        assert_matches_type(CustomForwardBackwardOperation, operation, path=["response"])

    @parametrize
    def test_raw_response_custom_forward_backward(self, client: Together, live: Live) -> None:
        response = client.post_training.operations.with_raw_response.custom_forward_backward(
            session_id=live.session_id,
            gradients=[{"data": [-0.1, 0.05, -0.08, 0.12, -0.03]}],
            samples=[
                {
                    "loss_fn_inputs": {
                        "target_tokens": {
                            "data": [1, 2, 3],
                            "dtype": "int64",
                        }
                    },
                    "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                }
            ],
            idempotency_key=live.key(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = response.parse()
        assert_matches_type(CustomForwardBackwardOperation, operation, path=["response"])

    @parametrize
    def test_streaming_response_custom_forward_backward(self, client: Together, live: Live) -> None:
        with client.post_training.operations.with_streaming_response.custom_forward_backward(
            session_id=live.session_id,
            gradients=[{"data": [-0.1, 0.05, -0.08, 0.12, -0.03]}],
            samples=[
                {
                    "loss_fn_inputs": {
                        "target_tokens": {
                            "data": [1, 2, 3],
                            "dtype": "int64",
                        }
                    },
                    "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                }
            ],
            idempotency_key=live.key(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = response.parse()
            assert_matches_type(CustomForwardBackwardOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_custom_forward_backward(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.operations.with_raw_response.custom_forward_backward(
                session_id="",
                gradients=[{"data": [-0.1, 0.05, -0.08, 0.12, -0.03]}],
                samples=[
                    {
                        "loss_fn_inputs": {
                            "target_tokens": {
                                "data": [1, 2, 3],
                                "dtype": "int64",
                            }
                        },
                        "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                    }
                ],
                idempotency_key=live.key(),
            )

    @parametrize
    def test_method_forward_backward(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.forward_backward(
            session_id=live.session_id,
            loss={"type": "LOSS_TYPE_GRPO"},
            samples=[
                {
                    "loss_fn_inputs": {
                        "target_tokens": {
                            "data": [1, 2, 3],
                            "dtype": "int64",
                        }
                    },
                    "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                }
            ],
            idempotency_key=live.key(),
        )
        assert_matches_type(ForwardBackwardOperation, operation, path=["response"])

    @parametrize
    def test_method_forward_backward_with_all_params(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.forward_backward(
            session_id=live.session_id,
            loss={
                "type": "LOSS_TYPE_GRPO",
                "grpo_params": {
                    "agg_type": "GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON",
                    "beta": 0.1,
                    "clip_high_threshold": 1.2,
                    "clip_low_threshold": 0.8,
                    "ratio_type": "GRPO_LOSS_RATIO_TYPE_TOKEN",
                },
            },
            samples=[
                {
                    "loss_fn_inputs": {
                        "target_tokens": {
                            "data": [1, 2, 3],
                            "dtype": "int64",
                            "shape": [3],
                        }
                    },
                    "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                    "routed_experts_key": "routing/._.K--w2k.1v/fe91bd231a9ad9bd2aada37aa7ccc3d3.8840",
                }
            ],
            idempotency_key=live.key(),
            forward_only=True,
            return_loss_fn_outputs=True,
        )
        assert_matches_type(ForwardBackwardOperation, operation, path=["response"])

    @parametrize
    def test_raw_response_forward_backward(self, client: Together, live: Live) -> None:
        response = client.post_training.operations.with_raw_response.forward_backward(
            session_id=live.session_id,
            loss={"type": "LOSS_TYPE_GRPO"},
            samples=[
                {
                    "loss_fn_inputs": {
                        "target_tokens": {
                            "data": [1, 2, 3],
                            "dtype": "int64",
                        }
                    },
                    "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                }
            ],
            idempotency_key=live.key(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = response.parse()
        assert_matches_type(ForwardBackwardOperation, operation, path=["response"])

    @parametrize
    def test_streaming_response_forward_backward(self, client: Together, live: Live) -> None:
        with client.post_training.operations.with_streaming_response.forward_backward(
            session_id=live.session_id,
            loss={"type": "LOSS_TYPE_GRPO"},
            samples=[
                {
                    "loss_fn_inputs": {
                        "target_tokens": {
                            "data": [1, 2, 3],
                            "dtype": "int64",
                        }
                    },
                    "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                }
            ],
            idempotency_key=live.key(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = response.parse()
            assert_matches_type(ForwardBackwardOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_forward_backward(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.operations.with_raw_response.forward_backward(
                session_id="",
                loss={"type": "LOSS_TYPE_GRPO"},
                samples=[
                    {
                        "loss_fn_inputs": {
                            "target_tokens": {
                                "data": [1, 2, 3],
                                "dtype": "int64",
                            }
                        },
                        "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                    }
                ],
                idempotency_key=live.key(),
            )

    @parametrize
    def test_method_optim_step(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.optim_step(
            session_id=live.session_id,
            idempotency_key=live.key(),
        )
        assert_matches_type(OptimStepOperation, operation, path=["response"])

    @parametrize
    def test_method_optim_step_with_all_params(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.optim_step(
            session_id=live.session_id,
            idempotency_key=live.key(),
            adam_params={
                "beta1": 0.9,
                "beta2": 0.95,
                "eps": 1e-8,
                "grad_clip_norm": 10,
                "learning_rate": 0.0001,
                "weight_decay": 0.1,
            },
            muon_params={
                "adam": {
                    "beta1": 0.9,
                    "beta2": 0.95,
                    "eps": 1e-8,
                    "grad_clip_norm": 10,
                    "learning_rate": 0.0001,
                    "weight_decay": 0.1,
                },
                "grad_clip_norm": 10,
                "learning_rate": 0.02,
                "momentum": 0.95,
                "newton_schulz_steps": 5,
                "weight_decay": 0,
            },
        )
        assert_matches_type(OptimStepOperation, operation, path=["response"])

    @parametrize
    def test_raw_response_optim_step(self, client: Together, live: Live) -> None:
        response = client.post_training.operations.with_raw_response.optim_step(
            session_id=live.session_id,
            idempotency_key=live.key(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = response.parse()
        assert_matches_type(OptimStepOperation, operation, path=["response"])

    @parametrize
    def test_streaming_response_optim_step(self, client: Together, live: Live) -> None:
        with client.post_training.operations.with_streaming_response.optim_step(
            session_id=live.session_id,
            idempotency_key=live.key(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = response.parse()
            assert_matches_type(OptimStepOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_optim_step(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.operations.with_raw_response.optim_step(
                session_id="",
                idempotency_key=live.key(),
            )

    @parametrize
    def test_method_retrieve_custom_forward_backward(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.retrieve_custom_forward_backward(
            operation_id=live.op("custom_forward_backward"),
            session_id=live.session_id,
        )
        assert_matches_type(CustomForwardBackwardOperation, operation, path=["response"])

    @parametrize
    def test_raw_response_retrieve_custom_forward_backward(self, client: Together, live: Live) -> None:
        response = client.post_training.operations.with_raw_response.retrieve_custom_forward_backward(
            operation_id=live.op("custom_forward_backward"),
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = response.parse()
        assert_matches_type(CustomForwardBackwardOperation, operation, path=["response"])

    @parametrize
    def test_streaming_response_retrieve_custom_forward_backward(self, client: Together, live: Live) -> None:
        with client.post_training.operations.with_streaming_response.retrieve_custom_forward_backward(
            operation_id=live.op("custom_forward_backward"),
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = response.parse()
            assert_matches_type(CustomForwardBackwardOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_retrieve_custom_forward_backward(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.operations.with_raw_response.retrieve_custom_forward_backward(
                operation_id=live.op("custom_forward_backward"),
                session_id="",
            )

        with pytest.raises(ValueError, match=r"Expected a non-empty value for `operation_id` but received ''"):
            client.post_training.operations.with_raw_response.retrieve_custom_forward_backward(
                operation_id="",
                session_id=live.session_id,
            )

    @parametrize
    def test_method_retrieve_forward_backward(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.retrieve_forward_backward(
            operation_id=live.op("forward_backward"),
            session_id=live.session_id,
        )
        assert_matches_type(ForwardBackwardOperation, operation, path=["response"])

    @parametrize
    def test_raw_response_retrieve_forward_backward(self, client: Together, live: Live) -> None:
        response = client.post_training.operations.with_raw_response.retrieve_forward_backward(
            operation_id=live.op("forward_backward"),
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = response.parse()
        assert_matches_type(ForwardBackwardOperation, operation, path=["response"])

    @parametrize
    def test_streaming_response_retrieve_forward_backward(self, client: Together, live: Live) -> None:
        with client.post_training.operations.with_streaming_response.retrieve_forward_backward(
            operation_id=live.op("forward_backward"),
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = response.parse()
            assert_matches_type(ForwardBackwardOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_retrieve_forward_backward(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.operations.with_raw_response.retrieve_forward_backward(
                operation_id=live.op("forward_backward"),
                session_id="",
            )

        with pytest.raises(ValueError, match=r"Expected a non-empty value for `operation_id` but received ''"):
            client.post_training.operations.with_raw_response.retrieve_forward_backward(
                operation_id="",
                session_id=live.session_id,
            )

    @parametrize
    def test_method_retrieve_inference_checkpoint(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.retrieve_inference_checkpoint(
            operation_id=live.op("inference_checkpoint"),
            session_id=live.session_id,
        )
        assert_matches_type(InferenceCheckpointOperation, operation, path=["response"])

    @parametrize
    def test_raw_response_retrieve_inference_checkpoint(self, client: Together, live: Live) -> None:
        response = client.post_training.operations.with_raw_response.retrieve_inference_checkpoint(
            operation_id=live.op("inference_checkpoint"),
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = response.parse()
        assert_matches_type(InferenceCheckpointOperation, operation, path=["response"])

    @parametrize
    def test_streaming_response_retrieve_inference_checkpoint(self, client: Together, live: Live) -> None:
        with client.post_training.operations.with_streaming_response.retrieve_inference_checkpoint(
            operation_id=live.op("inference_checkpoint"),
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = response.parse()
            assert_matches_type(InferenceCheckpointOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_retrieve_inference_checkpoint(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.operations.with_raw_response.retrieve_inference_checkpoint(
                operation_id=live.op("inference_checkpoint"),
                session_id="",
            )

        with pytest.raises(ValueError, match=r"Expected a non-empty value for `operation_id` but received ''"):
            client.post_training.operations.with_raw_response.retrieve_inference_checkpoint(
                operation_id="",
                session_id=live.session_id,
            )

    @parametrize
    def test_method_retrieve_optim_step(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.retrieve_optim_step(
            operation_id=live.op("optim_step"),
            session_id=live.session_id,
        )
        assert_matches_type(OptimStepOperation, operation, path=["response"])

    @parametrize
    def test_raw_response_retrieve_optim_step(self, client: Together, live: Live) -> None:
        response = client.post_training.operations.with_raw_response.retrieve_optim_step(
            operation_id=live.op("optim_step"),
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = response.parse()
        assert_matches_type(OptimStepOperation, operation, path=["response"])

    @parametrize
    def test_streaming_response_retrieve_optim_step(self, client: Together, live: Live) -> None:
        with client.post_training.operations.with_streaming_response.retrieve_optim_step(
            operation_id=live.op("optim_step"),
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = response.parse()
            assert_matches_type(OptimStepOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_retrieve_optim_step(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.operations.with_raw_response.retrieve_optim_step(
                operation_id=live.op("optim_step"),
                session_id="",
            )

        with pytest.raises(ValueError, match=r"Expected a non-empty value for `operation_id` but received ''"):
            client.post_training.operations.with_raw_response.retrieve_optim_step(
                operation_id="",
                session_id=live.session_id,
            )

    @parametrize
    def test_method_retrieve_sample(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.retrieve_sample(
            operation_id=live.op("sample"),
            session_id=live.session_id,
        )
        assert_matches_type(SampleOperation, operation, path=["response"])

    @parametrize
    def test_raw_response_retrieve_sample(self, client: Together, live: Live) -> None:
        response = client.post_training.operations.with_raw_response.retrieve_sample(
            operation_id=live.op("sample"),
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = response.parse()
        assert_matches_type(SampleOperation, operation, path=["response"])

    @parametrize
    def test_streaming_response_retrieve_sample(self, client: Together, live: Live) -> None:
        with client.post_training.operations.with_streaming_response.retrieve_sample(
            operation_id=live.op("sample"),
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = response.parse()
            assert_matches_type(SampleOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_retrieve_sample(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.operations.with_raw_response.retrieve_sample(
                operation_id=live.op("sample"),
                session_id="",
            )

        with pytest.raises(ValueError, match=r"Expected a non-empty value for `operation_id` but received ''"):
            client.post_training.operations.with_raw_response.retrieve_sample(
                operation_id="",
                session_id=live.session_id,
            )

    @parametrize
    def test_method_retrieve_training_checkpoint(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.retrieve_training_checkpoint(
            operation_id=live.op("training_checkpoint"),
            session_id=live.session_id,
        )
        assert_matches_type(TrainingCheckpointOperation, operation, path=["response"])

    @parametrize
    def test_raw_response_retrieve_training_checkpoint(self, client: Together, live: Live) -> None:
        response = client.post_training.operations.with_raw_response.retrieve_training_checkpoint(
            operation_id=live.op("training_checkpoint"),
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = response.parse()
        assert_matches_type(TrainingCheckpointOperation, operation, path=["response"])

    @parametrize
    def test_streaming_response_retrieve_training_checkpoint(self, client: Together, live: Live) -> None:
        with client.post_training.operations.with_streaming_response.retrieve_training_checkpoint(
            operation_id=live.op("training_checkpoint"),
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = response.parse()
            assert_matches_type(TrainingCheckpointOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_retrieve_training_checkpoint(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.operations.with_raw_response.retrieve_training_checkpoint(
                operation_id=live.op("training_checkpoint"),
                session_id="",
            )

        with pytest.raises(ValueError, match=r"Expected a non-empty value for `operation_id` but received ''"):
            client.post_training.operations.with_raw_response.retrieve_training_checkpoint(
                operation_id="",
                session_id=live.session_id,
            )

    @parametrize
    def test_method_retrieve_weights_sync(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.retrieve_weights_sync(
            operation_id=live.op("weights_sync"),
            session_id=live.session_id,
        )
        assert_matches_type(WeightsSyncOperation, operation, path=["response"])

    @parametrize
    def test_raw_response_retrieve_weights_sync(self, client: Together, live: Live) -> None:
        response = client.post_training.operations.with_raw_response.retrieve_weights_sync(
            operation_id=live.op("weights_sync"),
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = response.parse()
        assert_matches_type(WeightsSyncOperation, operation, path=["response"])

    @parametrize
    def test_streaming_response_retrieve_weights_sync(self, client: Together, live: Live) -> None:
        with client.post_training.operations.with_streaming_response.retrieve_weights_sync(
            operation_id=live.op("weights_sync"),
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = response.parse()
            assert_matches_type(WeightsSyncOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_retrieve_weights_sync(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.operations.with_raw_response.retrieve_weights_sync(
                operation_id=live.op("weights_sync"),
                session_id="",
            )

        with pytest.raises(ValueError, match=r"Expected a non-empty value for `operation_id` but received ''"):
            client.post_training.operations.with_raw_response.retrieve_weights_sync(
                operation_id="",
                session_id=live.session_id,
            )

    @parametrize
    def test_method_sample(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.sample(
            session_id=live.session_id,
            model_inputs=[{"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]}],
            idempotency_key=live.key(),
        )
        assert_matches_type(SampleOperation, operation, path=["response"])

    @parametrize
    def test_method_sample_with_all_params(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.sample(
            session_id=live.session_id,
            model_inputs=[{"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]}],
            idempotency_key=live.key(),
            num_samples=1,
            prompt_logprobs=False,
            return_routed_experts=False,
            sampling_params={
                "max_tokens": 512,
                "seed": "42",
                "stop": ["\n", "END"],
                "temperature": 1,
                "top_k": -1,
                "top_p": 1,
            },
            topk_prompt_logprobs=0,
        )
        assert_matches_type(SampleOperation, operation, path=["response"])

    @parametrize
    def test_raw_response_sample(self, client: Together, live: Live) -> None:
        response = client.post_training.operations.with_raw_response.sample(
            session_id=live.session_id,
            model_inputs=[{"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]}],
            idempotency_key=live.key(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = response.parse()
        assert_matches_type(SampleOperation, operation, path=["response"])

    @parametrize
    def test_streaming_response_sample(self, client: Together, live: Live) -> None:
        with client.post_training.operations.with_streaming_response.sample(
            session_id=live.session_id,
            model_inputs=[{"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]}],
            idempotency_key=live.key(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = response.parse()
            assert_matches_type(SampleOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_sample(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.operations.with_raw_response.sample(
                session_id="",
                model_inputs=[{"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]}],
                idempotency_key=live.key(),
            )

    @parametrize
    def test_method_weights_sync(self, client: Together, live: Live) -> None:
        operation = client.post_training.operations.weights_sync(
            session_id=live.session_id,
            weight_sync_type="WEIGHT_SYNC_TYPE_SYNCHRONOUS",
            idempotency_key=live.key(),
        )
        assert_matches_type(WeightsSyncOperation, operation, path=["response"])

    @parametrize
    def test_raw_response_weights_sync(self, client: Together, live: Live) -> None:
        response = client.post_training.operations.with_raw_response.weights_sync(
            session_id=live.session_id,
            weight_sync_type="WEIGHT_SYNC_TYPE_SYNCHRONOUS",
            idempotency_key=live.key(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = response.parse()
        assert_matches_type(WeightsSyncOperation, operation, path=["response"])

    @parametrize
    def test_streaming_response_weights_sync(self, client: Together, live: Live) -> None:
        with client.post_training.operations.with_streaming_response.weights_sync(
            session_id=live.session_id,
            weight_sync_type="WEIGHT_SYNC_TYPE_SYNCHRONOUS",
            idempotency_key=live.key(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = response.parse()
            assert_matches_type(WeightsSyncOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_weights_sync(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.operations.with_raw_response.weights_sync(
                session_id="",
                weight_sync_type="WEIGHT_SYNC_TYPE_SYNCHRONOUS",
                idempotency_key=live.key(),
            )


class TestAsyncOperations:
    parametrize = pytest.mark.parametrize("async_client", [False, True], indirect=True, ids=["loose", "strict"])

    @parametrize
    async def test_method_create_inference_checkpoint(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.create_inference_checkpoint(
            session_id=live.session_id,
            idempotency_key=live.key(),
        )
        assert_matches_type(InferenceCheckpointOperation, operation, path=["response"])

    @parametrize
    async def test_raw_response_create_inference_checkpoint(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.operations.with_raw_response.create_inference_checkpoint(
            session_id=live.session_id,
            idempotency_key=live.key(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = await response.parse()
        assert_matches_type(InferenceCheckpointOperation, operation, path=["response"])

    @parametrize
    async def test_streaming_response_create_inference_checkpoint(
        self, async_client: AsyncTogether, live: Live
    ) -> None:
        async with async_client.post_training.operations.with_streaming_response.create_inference_checkpoint(
            session_id=live.session_id,
            idempotency_key=live.key(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = await response.parse()
            assert_matches_type(InferenceCheckpointOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_create_inference_checkpoint(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.create_inference_checkpoint(
                session_id="",
                idempotency_key=live.key(),
            )

    @parametrize
    async def test_method_create_training_checkpoint(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.create_training_checkpoint(
            session_id=live.session_id,
            idempotency_key=live.key(),
        )
        assert_matches_type(TrainingCheckpointOperation, operation, path=["response"])

    @parametrize
    async def test_raw_response_create_training_checkpoint(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.operations.with_raw_response.create_training_checkpoint(
            session_id=live.session_id,
            idempotency_key=live.key(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = await response.parse()
        assert_matches_type(TrainingCheckpointOperation, operation, path=["response"])

    @parametrize
    async def test_streaming_response_create_training_checkpoint(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.operations.with_streaming_response.create_training_checkpoint(
            session_id=live.session_id,
            idempotency_key=live.key(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = await response.parse()
            assert_matches_type(TrainingCheckpointOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_create_training_checkpoint(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.create_training_checkpoint(
                session_id="",
                idempotency_key=live.key(),
            )

    @parametrize
    async def test_method_custom_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.custom_forward_backward(
            session_id=live.session_id,
            gradients=[{"data": [-0.1, 0.05, -0.08, 0.12, -0.03]}],
            samples=[
                {
                    "loss_fn_inputs": {
                        "target_tokens": {
                            "data": [1, 2, 3],
                            "dtype": "int64",
                        }
                    },
                    "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                }
            ],
            idempotency_key=live.key(),
        )
        assert_matches_type(CustomForwardBackwardOperation, operation, path=["response"])

    @parametrize
    async def test_raw_response_custom_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.operations.with_raw_response.custom_forward_backward(
            session_id=live.session_id,
            gradients=[{"data": [-0.1, 0.05, -0.08, 0.12, -0.03]}],
            samples=[
                {
                    "loss_fn_inputs": {
                        "target_tokens": {
                            "data": [1, 2, 3],
                            "dtype": "int64",
                        }
                    },
                    "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                }
            ],
            idempotency_key=live.key(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = await response.parse()
        assert_matches_type(CustomForwardBackwardOperation, operation, path=["response"])

    @parametrize
    async def test_streaming_response_custom_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.operations.with_streaming_response.custom_forward_backward(
            session_id=live.session_id,
            gradients=[{"data": [-0.1, 0.05, -0.08, 0.12, -0.03]}],
            samples=[
                {
                    "loss_fn_inputs": {
                        "target_tokens": {
                            "data": [1, 2, 3],
                            "dtype": "int64",
                        }
                    },
                    "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                }
            ],
            idempotency_key=live.key(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = await response.parse()
            assert_matches_type(CustomForwardBackwardOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_custom_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.custom_forward_backward(
                session_id="",
                gradients=[{"data": [-0.1, 0.05, -0.08, 0.12, -0.03]}],
                samples=[
                    {
                        "loss_fn_inputs": {
                            "target_tokens": {
                                "data": [1, 2, 3],
                                "dtype": "int64",
                            }
                        },
                        "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                    }
                ],
                idempotency_key=live.key(),
            )

    @parametrize
    async def test_method_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.forward_backward(
            session_id=live.session_id,
            loss={"type": "LOSS_TYPE_GRPO"},
            samples=[
                {
                    "loss_fn_inputs": {
                        "target_tokens": {
                            "data": [1, 2, 3],
                            "dtype": "int64",
                        }
                    },
                    "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                }
            ],
            idempotency_key=live.key(),
        )
        assert_matches_type(ForwardBackwardOperation, operation, path=["response"])

    @parametrize
    async def test_method_forward_backward_with_all_params(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.forward_backward(
            session_id=live.session_id,
            loss={
                "type": "LOSS_TYPE_GRPO",
                "grpo_params": {
                    "agg_type": "GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON",
                    "beta": 0.1,
                    "clip_high_threshold": 1.2,
                    "clip_low_threshold": 0.8,
                    "ratio_type": "GRPO_LOSS_RATIO_TYPE_TOKEN",
                },
            },
            samples=[
                {
                    "loss_fn_inputs": {
                        "target_tokens": {
                            "data": [1, 2, 3],
                            "dtype": "int64",
                            "shape": [3],
                        }
                    },
                    "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                    "routed_experts_key": "routing/._.K--w2k.1v/fe91bd231a9ad9bd2aada37aa7ccc3d3.8840",
                }
            ],
            idempotency_key=live.key(),
            forward_only=True,
            return_loss_fn_outputs=True,
        )
        assert_matches_type(ForwardBackwardOperation, operation, path=["response"])

    @parametrize
    async def test_raw_response_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.operations.with_raw_response.forward_backward(
            session_id=live.session_id,
            loss={"type": "LOSS_TYPE_GRPO"},
            samples=[
                {
                    "loss_fn_inputs": {
                        "target_tokens": {
                            "data": [1, 2, 3],
                            "dtype": "int64",
                        }
                    },
                    "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                }
            ],
            idempotency_key=live.key(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = await response.parse()
        assert_matches_type(ForwardBackwardOperation, operation, path=["response"])

    @parametrize
    async def test_streaming_response_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.operations.with_streaming_response.forward_backward(
            session_id=live.session_id,
            loss={"type": "LOSS_TYPE_GRPO"},
            samples=[
                {
                    "loss_fn_inputs": {
                        "target_tokens": {
                            "data": [1, 2, 3],
                            "dtype": "int64",
                        }
                    },
                    "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                }
            ],
            idempotency_key=live.key(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = await response.parse()
            assert_matches_type(ForwardBackwardOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.forward_backward(
                session_id="",
                loss={"type": "LOSS_TYPE_GRPO"},
                samples=[
                    {
                        "loss_fn_inputs": {
                            "target_tokens": {
                                "data": [1, 2, 3],
                                "dtype": "int64",
                            }
                        },
                        "model_input": {"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]},
                    }
                ],
                idempotency_key=live.key(),
            )

    @parametrize
    async def test_method_optim_step(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.optim_step(
            session_id=live.session_id,
            idempotency_key=live.key(),
        )
        assert_matches_type(OptimStepOperation, operation, path=["response"])

    @parametrize
    async def test_method_optim_step_with_all_params(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.optim_step(
            session_id=live.session_id,
            idempotency_key=live.key(),
            adam_params={
                "beta1": 0.9,
                "beta2": 0.95,
                "eps": 1e-8,
                "grad_clip_norm": 10,
                "learning_rate": 0.0001,
                "weight_decay": 0.1,
            },
            muon_params={
                "adam": {
                    "beta1": 0.9,
                    "beta2": 0.95,
                    "eps": 1e-8,
                    "grad_clip_norm": 10,
                    "learning_rate": 0.0001,
                    "weight_decay": 0.1,
                },
                "grad_clip_norm": 10,
                "learning_rate": 0.02,
                "momentum": 0.95,
                "newton_schulz_steps": 5,
                "weight_decay": 0,
            },
        )
        assert_matches_type(OptimStepOperation, operation, path=["response"])

    @parametrize
    async def test_raw_response_optim_step(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.operations.with_raw_response.optim_step(
            session_id=live.session_id,
            idempotency_key=live.key(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = await response.parse()
        assert_matches_type(OptimStepOperation, operation, path=["response"])

    @parametrize
    async def test_streaming_response_optim_step(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.operations.with_streaming_response.optim_step(
            session_id=live.session_id,
            idempotency_key=live.key(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = await response.parse()
            assert_matches_type(OptimStepOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_optim_step(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.optim_step(
                session_id="",
                idempotency_key=live.key(),
            )

    @parametrize
    async def test_method_retrieve_custom_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.retrieve_custom_forward_backward(
            operation_id=live.op("custom_forward_backward"),
            session_id=live.session_id,
        )
        assert_matches_type(CustomForwardBackwardOperation, operation, path=["response"])

    @parametrize
    async def test_raw_response_retrieve_custom_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.operations.with_raw_response.retrieve_custom_forward_backward(
            operation_id=live.op("custom_forward_backward"),
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = await response.parse()
        assert_matches_type(CustomForwardBackwardOperation, operation, path=["response"])

    @parametrize
    async def test_streaming_response_retrieve_custom_forward_backward(
        self, async_client: AsyncTogether, live: Live
    ) -> None:
        async with async_client.post_training.operations.with_streaming_response.retrieve_custom_forward_backward(
            operation_id=live.op("custom_forward_backward"),
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = await response.parse()
            assert_matches_type(CustomForwardBackwardOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_retrieve_custom_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.retrieve_custom_forward_backward(
                operation_id=live.op("custom_forward_backward"),
                session_id="",
            )

        with pytest.raises(ValueError, match=r"Expected a non-empty value for `operation_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.retrieve_custom_forward_backward(
                operation_id="",
                session_id=live.session_id,
            )

    @parametrize
    async def test_method_retrieve_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.retrieve_forward_backward(
            operation_id=live.op("forward_backward"),
            session_id=live.session_id,
        )
        assert_matches_type(ForwardBackwardOperation, operation, path=["response"])

    @parametrize
    async def test_raw_response_retrieve_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.operations.with_raw_response.retrieve_forward_backward(
            operation_id=live.op("forward_backward"),
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = await response.parse()
        assert_matches_type(ForwardBackwardOperation, operation, path=["response"])

    @parametrize
    async def test_streaming_response_retrieve_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.operations.with_streaming_response.retrieve_forward_backward(
            operation_id=live.op("forward_backward"),
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = await response.parse()
            assert_matches_type(ForwardBackwardOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_retrieve_forward_backward(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.retrieve_forward_backward(
                operation_id=live.op("forward_backward"),
                session_id="",
            )

        with pytest.raises(ValueError, match=r"Expected a non-empty value for `operation_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.retrieve_forward_backward(
                operation_id="",
                session_id=live.session_id,
            )

    @parametrize
    async def test_method_retrieve_inference_checkpoint(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.retrieve_inference_checkpoint(
            operation_id=live.op("inference_checkpoint"),
            session_id=live.session_id,
        )
        assert_matches_type(InferenceCheckpointOperation, operation, path=["response"])

    @parametrize
    async def test_raw_response_retrieve_inference_checkpoint(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.operations.with_raw_response.retrieve_inference_checkpoint(
            operation_id=live.op("inference_checkpoint"),
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = await response.parse()
        assert_matches_type(InferenceCheckpointOperation, operation, path=["response"])

    @parametrize
    async def test_streaming_response_retrieve_inference_checkpoint(
        self, async_client: AsyncTogether, live: Live
    ) -> None:
        async with async_client.post_training.operations.with_streaming_response.retrieve_inference_checkpoint(
            operation_id=live.op("inference_checkpoint"),
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = await response.parse()
            assert_matches_type(InferenceCheckpointOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_retrieve_inference_checkpoint(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.retrieve_inference_checkpoint(
                operation_id=live.op("inference_checkpoint"),
                session_id="",
            )

        with pytest.raises(ValueError, match=r"Expected a non-empty value for `operation_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.retrieve_inference_checkpoint(
                operation_id="",
                session_id=live.session_id,
            )

    @parametrize
    async def test_method_retrieve_optim_step(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.retrieve_optim_step(
            operation_id=live.op("optim_step"),
            session_id=live.session_id,
        )
        assert_matches_type(OptimStepOperation, operation, path=["response"])

    @parametrize
    async def test_raw_response_retrieve_optim_step(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.operations.with_raw_response.retrieve_optim_step(
            operation_id=live.op("optim_step"),
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = await response.parse()
        assert_matches_type(OptimStepOperation, operation, path=["response"])

    @parametrize
    async def test_streaming_response_retrieve_optim_step(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.operations.with_streaming_response.retrieve_optim_step(
            operation_id=live.op("optim_step"),
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = await response.parse()
            assert_matches_type(OptimStepOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_retrieve_optim_step(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.retrieve_optim_step(
                operation_id=live.op("optim_step"),
                session_id="",
            )

        with pytest.raises(ValueError, match=r"Expected a non-empty value for `operation_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.retrieve_optim_step(
                operation_id="",
                session_id=live.session_id,
            )

    @parametrize
    async def test_method_retrieve_sample(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.retrieve_sample(
            operation_id=live.op("sample"),
            session_id=live.session_id,
        )
        assert_matches_type(SampleOperation, operation, path=["response"])

    @parametrize
    async def test_raw_response_retrieve_sample(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.operations.with_raw_response.retrieve_sample(
            operation_id=live.op("sample"),
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = await response.parse()
        assert_matches_type(SampleOperation, operation, path=["response"])

    @parametrize
    async def test_streaming_response_retrieve_sample(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.operations.with_streaming_response.retrieve_sample(
            operation_id=live.op("sample"),
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = await response.parse()
            assert_matches_type(SampleOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_retrieve_sample(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.retrieve_sample(
                operation_id=live.op("sample"),
                session_id="",
            )

        with pytest.raises(ValueError, match=r"Expected a non-empty value for `operation_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.retrieve_sample(
                operation_id="",
                session_id=live.session_id,
            )

    @parametrize
    async def test_method_retrieve_training_checkpoint(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.retrieve_training_checkpoint(
            operation_id=live.op("training_checkpoint"),
            session_id=live.session_id,
        )
        assert_matches_type(TrainingCheckpointOperation, operation, path=["response"])

    @parametrize
    async def test_raw_response_retrieve_training_checkpoint(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.operations.with_raw_response.retrieve_training_checkpoint(
            operation_id=live.op("training_checkpoint"),
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = await response.parse()
        assert_matches_type(TrainingCheckpointOperation, operation, path=["response"])

    @parametrize
    async def test_streaming_response_retrieve_training_checkpoint(
        self, async_client: AsyncTogether, live: Live
    ) -> None:
        async with async_client.post_training.operations.with_streaming_response.retrieve_training_checkpoint(
            operation_id=live.op("training_checkpoint"),
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = await response.parse()
            assert_matches_type(TrainingCheckpointOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_retrieve_training_checkpoint(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.retrieve_training_checkpoint(
                operation_id=live.op("training_checkpoint"),
                session_id="",
            )

        with pytest.raises(ValueError, match=r"Expected a non-empty value for `operation_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.retrieve_training_checkpoint(
                operation_id="",
                session_id=live.session_id,
            )

    @parametrize
    async def test_method_retrieve_weights_sync(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.retrieve_weights_sync(
            operation_id=live.op("weights_sync"),
            session_id=live.session_id,
        )
        assert_matches_type(WeightsSyncOperation, operation, path=["response"])

    @parametrize
    async def test_raw_response_retrieve_weights_sync(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.operations.with_raw_response.retrieve_weights_sync(
            operation_id=live.op("weights_sync"),
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = await response.parse()
        assert_matches_type(WeightsSyncOperation, operation, path=["response"])

    @parametrize
    async def test_streaming_response_retrieve_weights_sync(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.operations.with_streaming_response.retrieve_weights_sync(
            operation_id=live.op("weights_sync"),
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = await response.parse()
            assert_matches_type(WeightsSyncOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_retrieve_weights_sync(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.retrieve_weights_sync(
                operation_id=live.op("weights_sync"),
                session_id="",
            )

        with pytest.raises(ValueError, match=r"Expected a non-empty value for `operation_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.retrieve_weights_sync(
                operation_id="",
                session_id=live.session_id,
            )

    @parametrize
    async def test_method_sample(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.sample(
            session_id=live.session_id,
            model_inputs=[{"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]}],
            idempotency_key=live.key(),
        )
        assert_matches_type(SampleOperation, operation, path=["response"])

    @parametrize
    async def test_method_sample_with_all_params(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.sample(
            session_id=live.session_id,
            model_inputs=[{"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]}],
            idempotency_key=live.key(),
            num_samples=1,
            prompt_logprobs=False,
            return_routed_experts=False,
            sampling_params={
                "max_tokens": 512,
                "seed": "42",
                "stop": ["\n", "END"],
                "temperature": 1,
                "top_k": -1,
                "top_p": 1,
            },
            topk_prompt_logprobs=0,
        )
        assert_matches_type(SampleOperation, operation, path=["response"])

    @parametrize
    async def test_raw_response_sample(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.operations.with_raw_response.sample(
            session_id=live.session_id,
            model_inputs=[{"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]}],
            idempotency_key=live.key(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = await response.parse()
        assert_matches_type(SampleOperation, operation, path=["response"])

    @parametrize
    async def test_streaming_response_sample(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.operations.with_streaming_response.sample(
            session_id=live.session_id,
            model_inputs=[{"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]}],
            idempotency_key=live.key(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = await response.parse()
            assert_matches_type(SampleOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_sample(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.sample(
                session_id="",
                model_inputs=[{"chunks": [{"encoded_text": {"tokens": [123, 456, 789]}}]}],
                idempotency_key=live.key(),
            )

    @parametrize
    async def test_method_weights_sync(self, async_client: AsyncTogether, live: Live) -> None:
        operation = await async_client.post_training.operations.weights_sync(
            session_id=live.session_id,
            weight_sync_type="WEIGHT_SYNC_TYPE_SYNCHRONOUS",
            idempotency_key=live.key(),
        )
        assert_matches_type(WeightsSyncOperation, operation, path=["response"])

    @parametrize
    async def test_raw_response_weights_sync(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.operations.with_raw_response.weights_sync(
            session_id=live.session_id,
            weight_sync_type="WEIGHT_SYNC_TYPE_SYNCHRONOUS",
            idempotency_key=live.key(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        operation = await response.parse()
        assert_matches_type(WeightsSyncOperation, operation, path=["response"])

    @parametrize
    async def test_streaming_response_weights_sync(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.operations.with_streaming_response.weights_sync(
            session_id=live.session_id,
            weight_sync_type="WEIGHT_SYNC_TYPE_SYNCHRONOUS",
            idempotency_key=live.key(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            operation = await response.parse()
            assert_matches_type(WeightsSyncOperation, operation, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_weights_sync(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.operations.with_raw_response.weights_sync(
                session_id="",
                weight_sync_type="WEIGHT_SYNC_TYPE_SYNCHRONOUS",
                idempotency_key=live.key(),
            )
