# Adapted from together 3.1.1's sdist (tests/api_resources/post_training/test_supported_models.py, "generated from our
# OpenAPI spec by Stainless", Apache-2.0): the assertions are unchanged; placeholder ids are live objects of
# a real `rlnb serve` (the `live` fixture, tests/server/sdk_generated/conftest.py lists every replacement).

from __future__ import annotations

from typing import Any, cast

import pytest
from together import AsyncTogether, Together
from together.types.post_training import RlSupportedModels

from tests.server.sdk_generated.conftest import Live
from tests.server.sdk_generated.utils import assert_matches_type


class TestSupportedModels:
    parametrize = pytest.mark.parametrize("client", [False, True], indirect=True, ids=["loose", "strict"])

    @parametrize
    def test_method_get(self, client: Together, live: Live) -> None:
        supported_model = client.post_training.supported_models.get()
        assert_matches_type(RlSupportedModels, supported_model, path=["response"])

    @parametrize
    def test_raw_response_get(self, client: Together, live: Live) -> None:
        response = client.post_training.supported_models.with_raw_response.get()

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        supported_model = response.parse()
        assert_matches_type(RlSupportedModels, supported_model, path=["response"])

    @parametrize
    def test_streaming_response_get(self, client: Together, live: Live) -> None:
        with client.post_training.supported_models.with_streaming_response.get() as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            supported_model = response.parse()
            assert_matches_type(RlSupportedModels, supported_model, path=["response"])

        assert cast(Any, response.is_closed) is True


class TestAsyncSupportedModels:
    parametrize = pytest.mark.parametrize("async_client", [False, True], indirect=True, ids=["loose", "strict"])

    @parametrize
    async def test_method_get(self, async_client: AsyncTogether, live: Live) -> None:
        supported_model = await async_client.post_training.supported_models.get()
        assert_matches_type(RlSupportedModels, supported_model, path=["response"])

    @parametrize
    async def test_raw_response_get(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.supported_models.with_raw_response.get()

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        supported_model = await response.parse()
        assert_matches_type(RlSupportedModels, supported_model, path=["response"])

    @parametrize
    async def test_streaming_response_get(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.supported_models.with_streaming_response.get() as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            supported_model = await response.parse()
            assert_matches_type(RlSupportedModels, supported_model, path=["response"])

        assert cast(Any, response.is_closed) is True
