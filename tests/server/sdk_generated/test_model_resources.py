# Adapted from together 3.1.1's sdist (tests/api_resources/post_training/test_model_resources.py, "generated from our
# OpenAPI spec by Stainless", Apache-2.0): the assertions are unchanged; placeholder ids are live objects of
# a real `rlnb serve` (the `live` fixture, tests/server/sdk_generated/conftest.py lists every replacement).

from __future__ import annotations

from typing import Any, cast

import pytest
from together import AsyncTogether, Together
from together.types.post_training import (
    ModelResources,
    ModelResourcesEstimateCostResponse,
    ModelResourcesListResponse,
)

from tests.server.sdk_generated.conftest import Live
from tests.server.sdk_generated.utils import assert_matches_type


class TestModelResources:
    parametrize = pytest.mark.parametrize("client", [False, True], indirect=True, ids=["loose", "strict"])

    @parametrize
    def test_method_create(self, client: Together, live: Live) -> None:
        model_resource = client.post_training.model_resources.create(
            base_model="rlnb/tiny",
        )
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    def test_method_create_with_all_params(self, client: Together, live: Live) -> None:
        model_resource = client.post_training.model_resources.create(
            base_model="rlnb/tiny",
            compute_config={
                "gpu_type": "B200-SXM",
                "num_generator_replicas": 2,
            },
            inactive_timeout=3600,
            lora_enabled=True,
            optimizer_config={
                "muon": {"scaling_strategy": "MUON_SCALING_STRATEGY_ORIGINAL"},
            },
        )
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    def test_raw_response_create(self, client: Together, live: Live) -> None:
        response = client.post_training.model_resources.with_raw_response.create(
            base_model="rlnb/tiny",
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        model_resource = response.parse()
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    def test_streaming_response_create(self, client: Together, live: Live) -> None:
        with client.post_training.model_resources.with_streaming_response.create(
            base_model="rlnb/tiny",
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            model_resource = response.parse()
            assert_matches_type(ModelResources, model_resource, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_method_retrieve(self, client: Together, live: Live) -> None:
        model_resource = client.post_training.model_resources.retrieve(
            live.model_resources_id,
        )
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    def test_raw_response_retrieve(self, client: Together, live: Live) -> None:
        response = client.post_training.model_resources.with_raw_response.retrieve(
            live.model_resources_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        model_resource = response.parse()
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    def test_streaming_response_retrieve(self, client: Together, live: Live) -> None:
        with client.post_training.model_resources.with_streaming_response.retrieve(
            live.model_resources_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            model_resource = response.parse()
            assert_matches_type(ModelResources, model_resource, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_retrieve(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `model_resources_id` but received ''"):
            client.post_training.model_resources.with_raw_response.retrieve(
                "",
            )

    @parametrize
    def test_method_list(self, client: Together, live: Live) -> None:
        model_resource = client.post_training.model_resources.list()
        assert_matches_type(ModelResourcesListResponse, model_resource, path=["response"])

    @parametrize
    def test_method_list_with_all_params(self, client: Together, live: Live) -> None:
        model_resource = client.post_training.model_resources.list(
            after=live.model_resources_id,
            created_by="created_by",
            limit=1,
            status=["MODEL_RESOURCES_STATUS_PENDING"],
        )
        assert_matches_type(ModelResourcesListResponse, model_resource, path=["response"])

    @parametrize
    def test_raw_response_list(self, client: Together, live: Live) -> None:
        response = client.post_training.model_resources.with_raw_response.list()

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        model_resource = response.parse()
        assert_matches_type(ModelResourcesListResponse, model_resource, path=["response"])

    @parametrize
    def test_streaming_response_list(self, client: Together, live: Live) -> None:
        with client.post_training.model_resources.with_streaming_response.list() as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            model_resource = response.parse()
            assert_matches_type(ModelResourcesListResponse, model_resource, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_method_estimate_cost(self, client: Together, live: Live) -> None:
        model_resource = client.post_training.model_resources.estimate_cost(
            base_model="rlnb/tiny",
        )
        assert_matches_type(ModelResourcesEstimateCostResponse, model_resource, path=["response"])

    @parametrize
    def test_method_estimate_cost_with_all_params(self, client: Together, live: Live) -> None:
        model_resource = client.post_training.model_resources.estimate_cost(
            base_model="rlnb/tiny",
            compute_config={
                "gpu_type": "B200-SXM",
                "num_generator_replicas": 2,
            },
            inactive_timeout=3600,
            lora_enabled=True,
            optimizer_config={
                "muon": {"scaling_strategy": "MUON_SCALING_STRATEGY_ORIGINAL"},
            },
        )
        assert_matches_type(ModelResourcesEstimateCostResponse, model_resource, path=["response"])

    @parametrize
    def test_raw_response_estimate_cost(self, client: Together, live: Live) -> None:
        response = client.post_training.model_resources.with_raw_response.estimate_cost(
            base_model="rlnb/tiny",
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        model_resource = response.parse()
        assert_matches_type(ModelResourcesEstimateCostResponse, model_resource, path=["response"])

    @parametrize
    def test_streaming_response_estimate_cost(self, client: Together, live: Live) -> None:
        with client.post_training.model_resources.with_streaming_response.estimate_cost(
            base_model="rlnb/tiny",
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            model_resource = response.parse()
            assert_matches_type(ModelResourcesEstimateCostResponse, model_resource, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_method_extend_expiry(self, client: Together, live: Live) -> None:
        model_resource = client.post_training.model_resources.extend_expiry(
            model_resources_id=live.model_resources_id,
            seconds=7200,
        )
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    def test_raw_response_extend_expiry(self, client: Together, live: Live) -> None:
        response = client.post_training.model_resources.with_raw_response.extend_expiry(
            model_resources_id=live.model_resources_id,
            seconds=7200,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        model_resource = response.parse()
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    def test_streaming_response_extend_expiry(self, client: Together, live: Live) -> None:
        with client.post_training.model_resources.with_streaming_response.extend_expiry(
            model_resources_id=live.model_resources_id,
            seconds=7200,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            model_resource = response.parse()
            assert_matches_type(ModelResources, model_resource, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_extend_expiry(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `model_resources_id` but received ''"):
            client.post_training.model_resources.with_raw_response.extend_expiry(
                model_resources_id="",
                seconds=7200,
            )

    @parametrize
    def test_method_stop(self, client: Together, live: Live) -> None:
        model_resource = client.post_training.model_resources.stop(
            model_resources_id=live.fresh_resource_id(),
        )
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    def test_method_stop_with_all_params(self, client: Together, live: Live) -> None:
        model_resource = client.post_training.model_resources.stop(
            model_resources_id=live.fresh_resource_id(),
            force=True,
        )
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    def test_raw_response_stop(self, client: Together, live: Live) -> None:
        response = client.post_training.model_resources.with_raw_response.stop(
            model_resources_id=live.fresh_resource_id(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        model_resource = response.parse()
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    def test_streaming_response_stop(self, client: Together, live: Live) -> None:
        with client.post_training.model_resources.with_streaming_response.stop(
            model_resources_id=live.fresh_resource_id(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            model_resource = response.parse()
            assert_matches_type(ModelResources, model_resource, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_stop(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `model_resources_id` but received ''"):
            client.post_training.model_resources.with_raw_response.stop(
                model_resources_id="",
            )


class TestAsyncModelResources:
    parametrize = pytest.mark.parametrize("async_client", [False, True], indirect=True, ids=["loose", "strict"])

    @parametrize
    async def test_method_create(self, async_client: AsyncTogether, live: Live) -> None:
        model_resource = await async_client.post_training.model_resources.create(
            base_model="rlnb/tiny",
        )
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    async def test_method_create_with_all_params(self, async_client: AsyncTogether, live: Live) -> None:
        model_resource = await async_client.post_training.model_resources.create(
            base_model="rlnb/tiny",
            compute_config={
                "gpu_type": "B200-SXM",
                "num_generator_replicas": 2,
            },
            inactive_timeout=3600,
            lora_enabled=True,
            optimizer_config={
                "muon": {"scaling_strategy": "MUON_SCALING_STRATEGY_ORIGINAL"},
            },
        )
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    async def test_raw_response_create(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.model_resources.with_raw_response.create(
            base_model="rlnb/tiny",
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        model_resource = await response.parse()
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    async def test_streaming_response_create(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.model_resources.with_streaming_response.create(
            base_model="rlnb/tiny",
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            model_resource = await response.parse()
            assert_matches_type(ModelResources, model_resource, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_method_retrieve(self, async_client: AsyncTogether, live: Live) -> None:
        model_resource = await async_client.post_training.model_resources.retrieve(
            live.model_resources_id,
        )
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    async def test_raw_response_retrieve(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.model_resources.with_raw_response.retrieve(
            live.model_resources_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        model_resource = await response.parse()
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    async def test_streaming_response_retrieve(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.model_resources.with_streaming_response.retrieve(
            live.model_resources_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            model_resource = await response.parse()
            assert_matches_type(ModelResources, model_resource, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_retrieve(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `model_resources_id` but received ''"):
            await async_client.post_training.model_resources.with_raw_response.retrieve(
                "",
            )

    @parametrize
    async def test_method_list(self, async_client: AsyncTogether, live: Live) -> None:
        model_resource = await async_client.post_training.model_resources.list()
        assert_matches_type(ModelResourcesListResponse, model_resource, path=["response"])

    @parametrize
    async def test_method_list_with_all_params(self, async_client: AsyncTogether, live: Live) -> None:
        model_resource = await async_client.post_training.model_resources.list(
            after=live.model_resources_id,
            created_by="created_by",
            limit=1,
            status=["MODEL_RESOURCES_STATUS_PENDING"],
        )
        assert_matches_type(ModelResourcesListResponse, model_resource, path=["response"])

    @parametrize
    async def test_raw_response_list(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.model_resources.with_raw_response.list()

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        model_resource = await response.parse()
        assert_matches_type(ModelResourcesListResponse, model_resource, path=["response"])

    @parametrize
    async def test_streaming_response_list(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.model_resources.with_streaming_response.list() as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            model_resource = await response.parse()
            assert_matches_type(ModelResourcesListResponse, model_resource, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_method_estimate_cost(self, async_client: AsyncTogether, live: Live) -> None:
        model_resource = await async_client.post_training.model_resources.estimate_cost(
            base_model="rlnb/tiny",
        )
        assert_matches_type(ModelResourcesEstimateCostResponse, model_resource, path=["response"])

    @parametrize
    async def test_method_estimate_cost_with_all_params(self, async_client: AsyncTogether, live: Live) -> None:
        model_resource = await async_client.post_training.model_resources.estimate_cost(
            base_model="rlnb/tiny",
            compute_config={
                "gpu_type": "B200-SXM",
                "num_generator_replicas": 2,
            },
            inactive_timeout=3600,
            lora_enabled=True,
            optimizer_config={
                "muon": {"scaling_strategy": "MUON_SCALING_STRATEGY_ORIGINAL"},
            },
        )
        assert_matches_type(ModelResourcesEstimateCostResponse, model_resource, path=["response"])

    @parametrize
    async def test_raw_response_estimate_cost(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.model_resources.with_raw_response.estimate_cost(
            base_model="rlnb/tiny",
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        model_resource = await response.parse()
        assert_matches_type(ModelResourcesEstimateCostResponse, model_resource, path=["response"])

    @parametrize
    async def test_streaming_response_estimate_cost(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.model_resources.with_streaming_response.estimate_cost(
            base_model="rlnb/tiny",
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            model_resource = await response.parse()
            assert_matches_type(ModelResourcesEstimateCostResponse, model_resource, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_method_extend_expiry(self, async_client: AsyncTogether, live: Live) -> None:
        model_resource = await async_client.post_training.model_resources.extend_expiry(
            model_resources_id=live.model_resources_id,
            seconds=7200,
        )
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    async def test_raw_response_extend_expiry(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.model_resources.with_raw_response.extend_expiry(
            model_resources_id=live.model_resources_id,
            seconds=7200,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        model_resource = await response.parse()
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    async def test_streaming_response_extend_expiry(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.model_resources.with_streaming_response.extend_expiry(
            model_resources_id=live.model_resources_id,
            seconds=7200,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            model_resource = await response.parse()
            assert_matches_type(ModelResources, model_resource, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_extend_expiry(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `model_resources_id` but received ''"):
            await async_client.post_training.model_resources.with_raw_response.extend_expiry(
                model_resources_id="",
                seconds=7200,
            )

    @parametrize
    async def test_method_stop(self, async_client: AsyncTogether, live: Live) -> None:
        model_resource = await async_client.post_training.model_resources.stop(
            model_resources_id=live.fresh_resource_id(),
        )
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    async def test_method_stop_with_all_params(self, async_client: AsyncTogether, live: Live) -> None:
        model_resource = await async_client.post_training.model_resources.stop(
            model_resources_id=live.fresh_resource_id(),
            force=True,
        )
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    async def test_raw_response_stop(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.model_resources.with_raw_response.stop(
            model_resources_id=live.fresh_resource_id(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        model_resource = await response.parse()
        assert_matches_type(ModelResources, model_resource, path=["response"])

    @parametrize
    async def test_streaming_response_stop(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.model_resources.with_streaming_response.stop(
            model_resources_id=live.fresh_resource_id(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            model_resource = await response.parse()
            assert_matches_type(ModelResources, model_resource, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_stop(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `model_resources_id` but received ''"):
            await async_client.post_training.model_resources.with_raw_response.stop(
                model_resources_id="",
            )
