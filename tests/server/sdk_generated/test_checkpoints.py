# Adapted from together 3.1.1's sdist (tests/api_resources/post_training/test_checkpoints.py, "generated from our
# OpenAPI spec by Stainless", Apache-2.0): the assertions are unchanged; placeholder ids are live objects of
# a real `rlnb serve` (the `live` fixture, tests/server/sdk_generated/conftest.py lists every replacement).

from __future__ import annotations

from typing import Any, cast

import pytest
from together import AsyncTogether, Together
from together.types.post_training import (
    Checkpoint,
    CheckpointDownloadResponse,
    CheckpointsListResponse,
)

from tests.server.sdk_generated.conftest import Live
from tests.server.sdk_generated.utils import assert_matches_type


class TestCheckpoints:
    parametrize = pytest.mark.parametrize("client", [False, True], indirect=True, ids=["loose", "strict"])

    @parametrize
    def test_method_retrieve(self, client: Together, live: Live) -> None:
        checkpoint = client.post_training.checkpoints.retrieve(
            live.inference_checkpoint_id,
        )
        assert_matches_type(Checkpoint, checkpoint, path=["response"])

    @parametrize
    def test_raw_response_retrieve(self, client: Together, live: Live) -> None:
        response = client.post_training.checkpoints.with_raw_response.retrieve(
            live.inference_checkpoint_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        checkpoint = response.parse()
        assert_matches_type(Checkpoint, checkpoint, path=["response"])

    @parametrize
    def test_streaming_response_retrieve(self, client: Together, live: Live) -> None:
        with client.post_training.checkpoints.with_streaming_response.retrieve(
            live.inference_checkpoint_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            checkpoint = response.parse()
            assert_matches_type(Checkpoint, checkpoint, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_retrieve(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `id` but received ''"):
            client.post_training.checkpoints.with_raw_response.retrieve(
                "",
            )

    @parametrize
    def test_method_list(self, client: Together, live: Live) -> None:
        checkpoint = client.post_training.checkpoints.list()
        assert_matches_type(CheckpointsListResponse, checkpoint, path=["response"])

    @parametrize
    def test_method_list_with_all_params(self, client: Together, live: Live) -> None:
        checkpoint = client.post_training.checkpoints.list(
            after=live.inference_checkpoint_id,
            base_model="rlnb/tiny",
            limit=1,
            session_id=live.session_id,
            type="CHECKPOINT_TYPE_TRAINING",
        )
        assert_matches_type(CheckpointsListResponse, checkpoint, path=["response"])

    @parametrize
    def test_raw_response_list(self, client: Together, live: Live) -> None:
        response = client.post_training.checkpoints.with_raw_response.list()

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        checkpoint = response.parse()
        assert_matches_type(CheckpointsListResponse, checkpoint, path=["response"])

    @parametrize
    def test_streaming_response_list(self, client: Together, live: Live) -> None:
        with client.post_training.checkpoints.with_streaming_response.list() as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            checkpoint = response.parse()
            assert_matches_type(CheckpointsListResponse, checkpoint, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_method_download(self, client: Together, live: Live) -> None:
        checkpoint = client.post_training.checkpoints.download(
            id=live.inference_checkpoint_id,
            variant="CHECKPOINT_VARIANT_UNSPECIFIED",
        )
        assert_matches_type(CheckpointDownloadResponse, checkpoint, path=["response"])

    @parametrize
    def test_raw_response_download(self, client: Together, live: Live) -> None:
        response = client.post_training.checkpoints.with_raw_response.download(
            id=live.inference_checkpoint_id,
            variant="CHECKPOINT_VARIANT_UNSPECIFIED",
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        checkpoint = response.parse()
        assert_matches_type(CheckpointDownloadResponse, checkpoint, path=["response"])

    @parametrize
    def test_streaming_response_download(self, client: Together, live: Live) -> None:
        with client.post_training.checkpoints.with_streaming_response.download(
            id=live.inference_checkpoint_id,
            variant="CHECKPOINT_VARIANT_UNSPECIFIED",
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            checkpoint = response.parse()
            assert_matches_type(CheckpointDownloadResponse, checkpoint, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_download(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `id` but received ''"):
            client.post_training.checkpoints.with_raw_response.download(
                id="",
                variant="CHECKPOINT_VARIANT_UNSPECIFIED",
            )


class TestAsyncCheckpoints:
    parametrize = pytest.mark.parametrize("async_client", [False, True], indirect=True, ids=["loose", "strict"])

    @parametrize
    async def test_method_retrieve(self, async_client: AsyncTogether, live: Live) -> None:
        checkpoint = await async_client.post_training.checkpoints.retrieve(
            live.inference_checkpoint_id,
        )
        assert_matches_type(Checkpoint, checkpoint, path=["response"])

    @parametrize
    async def test_raw_response_retrieve(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.checkpoints.with_raw_response.retrieve(
            live.inference_checkpoint_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        checkpoint = await response.parse()
        assert_matches_type(Checkpoint, checkpoint, path=["response"])

    @parametrize
    async def test_streaming_response_retrieve(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.checkpoints.with_streaming_response.retrieve(
            live.inference_checkpoint_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            checkpoint = await response.parse()
            assert_matches_type(Checkpoint, checkpoint, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_retrieve(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `id` but received ''"):
            await async_client.post_training.checkpoints.with_raw_response.retrieve(
                "",
            )

    @parametrize
    async def test_method_list(self, async_client: AsyncTogether, live: Live) -> None:
        checkpoint = await async_client.post_training.checkpoints.list()
        assert_matches_type(CheckpointsListResponse, checkpoint, path=["response"])

    @parametrize
    async def test_method_list_with_all_params(self, async_client: AsyncTogether, live: Live) -> None:
        checkpoint = await async_client.post_training.checkpoints.list(
            after=live.inference_checkpoint_id,
            base_model="rlnb/tiny",
            limit=1,
            session_id=live.session_id,
            type="CHECKPOINT_TYPE_TRAINING",
        )
        assert_matches_type(CheckpointsListResponse, checkpoint, path=["response"])

    @parametrize
    async def test_raw_response_list(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.checkpoints.with_raw_response.list()

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        checkpoint = await response.parse()
        assert_matches_type(CheckpointsListResponse, checkpoint, path=["response"])

    @parametrize
    async def test_streaming_response_list(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.checkpoints.with_streaming_response.list() as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            checkpoint = await response.parse()
            assert_matches_type(CheckpointsListResponse, checkpoint, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_method_download(self, async_client: AsyncTogether, live: Live) -> None:
        checkpoint = await async_client.post_training.checkpoints.download(
            id=live.inference_checkpoint_id,
            variant="CHECKPOINT_VARIANT_UNSPECIFIED",
        )
        assert_matches_type(CheckpointDownloadResponse, checkpoint, path=["response"])

    @parametrize
    async def test_raw_response_download(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.checkpoints.with_raw_response.download(
            id=live.inference_checkpoint_id,
            variant="CHECKPOINT_VARIANT_UNSPECIFIED",
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        checkpoint = await response.parse()
        assert_matches_type(CheckpointDownloadResponse, checkpoint, path=["response"])

    @parametrize
    async def test_streaming_response_download(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.checkpoints.with_streaming_response.download(
            id=live.inference_checkpoint_id,
            variant="CHECKPOINT_VARIANT_UNSPECIFIED",
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            checkpoint = await response.parse()
            assert_matches_type(CheckpointDownloadResponse, checkpoint, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_download(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `id` but received ''"):
            await async_client.post_training.checkpoints.with_raw_response.download(
                id="",
                variant="CHECKPOINT_VARIANT_UNSPECIFIED",
            )
