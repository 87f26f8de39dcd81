# Adapted from together 3.1.1's sdist (tests/api_resources/post_training/test_sessions.py, "generated from our
# OpenAPI spec by Stainless", Apache-2.0): the assertions are unchanged; placeholder ids are live objects of
# a real `rlnb serve` (the `live` fixture, tests/server/sdk_generated/conftest.py lists every replacement).

from __future__ import annotations

from typing import Any, cast

import pytest
from together import AsyncTogether, Together
from together.types.post_training import (
    Session,
    SessionsListResponse,
)

from tests.server.sdk_generated.conftest import Live
from tests.server.sdk_generated.utils import assert_matches_type


class TestSessions:
    parametrize = pytest.mark.parametrize("client", [False, True], indirect=True, ids=["loose", "strict"])

    @parametrize
    def test_method_create(self, client: Together, live: Live) -> None:
        session = client.post_training.sessions.create(
            model_resources_id=live.fresh_resource_id(),
        )
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    def test_method_create_with_all_params(self, client: Together, live: Live) -> None:
        session = client.post_training.sessions.create(
            model_resources_id=live.fresh_resource_id(),
            display_name="gsm8k-experiment-2",
            load_optimizer=True,
            lora_config={
                "alpha": 64,
                "dropout": 0,
                "rank": 32,
                "seed": "59",
                "train_unembed": True,
            },
            metadata={
                "wandb": {
                    "entity": "example-org",
                    "group": "gsm8k-35b-sweep",
                    "project": "grpo-gsm8k",
                    "run_id": "abc123",
                    "run_name": "exp2-thinking-4k-ctx",
                    "url": "https://wandb.ai/example-org/example-project/runs/run-id",
                }
            },
            resume_from_checkpoint_id=live.training_checkpoint_id,
        )
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    def test_raw_response_create(self, client: Together, live: Live) -> None:
        response = client.post_training.sessions.with_raw_response.create(
            model_resources_id=live.fresh_resource_id(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        session = response.parse()
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    def test_streaming_response_create(self, client: Together, live: Live) -> None:
        with client.post_training.sessions.with_streaming_response.create(
            model_resources_id=live.fresh_resource_id(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            session = response.parse()
            assert_matches_type(Session, session, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_method_retrieve(self, client: Together, live: Live) -> None:
        session = client.post_training.sessions.retrieve(
            live.session_id,
        )
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    def test_raw_response_retrieve(self, client: Together, live: Live) -> None:
        response = client.post_training.sessions.with_raw_response.retrieve(
            live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        session = response.parse()
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    def test_streaming_response_retrieve(self, client: Together, live: Live) -> None:
        with client.post_training.sessions.with_streaming_response.retrieve(
            live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            session = response.parse()
            assert_matches_type(Session, session, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_retrieve(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.sessions.with_raw_response.retrieve(
                "",
            )

    @parametrize
    def test_method_update(self, client: Together, live: Live) -> None:
        session = client.post_training.sessions.update(
            session_id=live.session_id,
        )
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    def test_method_update_with_all_params(self, client: Together, live: Live) -> None:
        session = client.post_training.sessions.update(
            session_id=live.session_id,
            display_name="display_name",
            metadata={
                "wandb": {
                    "entity": "example-org",
                    "group": "gsm8k-35b-sweep",
                    "project": "grpo-gsm8k",
                    "run_id": "abc123",
                    "run_name": "exp2-thinking-4k-ctx",
                    "url": "https://wandb.ai/example-org/example-project/runs/run-id",
                }
            },
        )
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    def test_raw_response_update(self, client: Together, live: Live) -> None:
        response = client.post_training.sessions.with_raw_response.update(
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        session = response.parse()
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    def test_streaming_response_update(self, client: Together, live: Live) -> None:
        with client.post_training.sessions.with_streaming_response.update(
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            session = response.parse()
            assert_matches_type(Session, session, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_update(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.sessions.with_raw_response.update(
                session_id="",
            )

    @parametrize
    def test_method_list(self, client: Together, live: Live) -> None:
        session = client.post_training.sessions.list()
        assert_matches_type(SessionsListResponse, session, path=["response"])

    @parametrize
    def test_method_list_with_all_params(self, client: Together, live: Live) -> None:
        session = client.post_training.sessions.list(
            after=live.session_id,
            created_by="created_by",
            limit=1,
            model_resources_id=live.model_resources_id,
            status=["TRAINING_SESSION_STATUS_CREATING"],
        )
        assert_matches_type(SessionsListResponse, session, path=["response"])

    @parametrize
    def test_raw_response_list(self, client: Together, live: Live) -> None:
        response = client.post_training.sessions.with_raw_response.list()

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        session = response.parse()
        assert_matches_type(SessionsListResponse, session, path=["response"])

    @parametrize
    def test_streaming_response_list(self, client: Together, live: Live) -> None:
        with client.post_training.sessions.with_streaming_response.list() as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            session = response.parse()
            assert_matches_type(SessionsListResponse, session, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_method_stop(self, client: Together, live: Live) -> None:
        session = client.post_training.sessions.stop(
            live.fresh_session_id(),
        )
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    def test_raw_response_stop(self, client: Together, live: Live) -> None:
        response = client.post_training.sessions.with_raw_response.stop(
            live.fresh_session_id(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        session = response.parse()
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    def test_streaming_response_stop(self, client: Together, live: Live) -> None:
        with client.post_training.sessions.with_streaming_response.stop(
            live.fresh_session_id(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            session = response.parse()
            assert_matches_type(Session, session, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    def test_path_params_stop(self, client: Together, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            client.post_training.sessions.with_raw_response.stop(
                "",
            )


class TestAsyncSessions:
    parametrize = pytest.mark.parametrize("async_client", [False, True], indirect=True, ids=["loose", "strict"])

    @parametrize
    async def test_method_create(self, async_client: AsyncTogether, live: Live) -> None:
        session = await async_client.post_training.sessions.create(
            model_resources_id=live.fresh_resource_id(),
        )
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    async def test_method_create_with_all_params(self, async_client: AsyncTogether, live: Live) -> None:
        session = await async_client.post_training.sessions.create(
            model_resources_id=live.fresh_resource_id(),
            display_name="gsm8k-experiment-2",
            load_optimizer=True,
            lora_config={
                "alpha": 64,
                "dropout": 0,
                "rank": 32,
                "seed": "59",
                "train_unembed": True,
            },
            metadata={
                "wandb": {
                    "entity": "example-org",
                    "group": "gsm8k-35b-sweep",
                    "project": "grpo-gsm8k",
                    "run_id": "abc123",
                    "run_name": "exp2-thinking-4k-ctx",
                    "url": "https://wandb.ai/example-org/example-project/runs/run-id",
                }
            },
            resume_from_checkpoint_id=live.training_checkpoint_id,
        )
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    async def test_raw_response_create(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.sessions.with_raw_response.create(
            model_resources_id=live.fresh_resource_id(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        session = await response.parse()
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    async def test_streaming_response_create(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.sessions.with_streaming_response.create(
            model_resources_id=live.fresh_resource_id(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            session = await response.parse()
            assert_matches_type(Session, session, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_method_retrieve(self, async_client: AsyncTogether, live: Live) -> None:
        session = await async_client.post_training.sessions.retrieve(
            live.session_id,
        )
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    async def test_raw_response_retrieve(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.sessions.with_raw_response.retrieve(
            live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        session = await response.parse()
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    async def test_streaming_response_retrieve(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.sessions.with_streaming_response.retrieve(
            live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            session = await response.parse()
            assert_matches_type(Session, session, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_retrieve(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.sessions.with_raw_response.retrieve(
                "",
            )

    @parametrize
    async def test_method_update(self, async_client: AsyncTogether, live: Live) -> None:
        session = await async_client.post_training.sessions.update(
            session_id=live.session_id,
        )
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    async def test_method_update_with_all_params(self, async_client: AsyncTogether, live: Live) -> None:
        session = await async_client.post_training.sessions.update(
            session_id=live.session_id,
            display_name="display_name",
            metadata={
                "wandb": {
                    "entity": "example-org",
                    "group": "gsm8k-35b-sweep",
                    "project": "grpo-gsm8k",
                    "run_id": "abc123",
                    "run_name": "exp2-thinking-4k-ctx",
                    "url": "https://wandb.ai/example-org/example-project/runs/run-id",
                }
            },
        )
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    async def test_raw_response_update(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.sessions.with_raw_response.update(
            session_id=live.session_id,
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        session = await response.parse()
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    async def test_streaming_response_update(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.sessions.with_streaming_response.update(
            session_id=live.session_id,
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            session = await response.parse()
            assert_matches_type(Session, session, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_update(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.sessions.with_raw_response.update(
                session_id="",
            )

    @parametrize
    async def test_method_list(self, async_client: AsyncTogether, live: Live) -> None:
        session = await async_client.post_training.sessions.list()
        assert_matches_type(SessionsListResponse, session, path=["response"])

    @parametrize
    async def test_method_list_with_all_params(self, async_client: AsyncTogether, live: Live) -> None:
        session = await async_client.post_training.sessions.list(
            after=live.session_id,
            created_by="created_by",
            limit=1,
            model_resources_id=live.model_resources_id,
            status=["TRAINING_SESSION_STATUS_CREATING"],
        )
        assert_matches_type(SessionsListResponse, session, path=["response"])

    @parametrize
    async def test_raw_response_list(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.sessions.with_raw_response.list()

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        session = await response.parse()
        assert_matches_type(SessionsListResponse, session, path=["response"])

    @parametrize
    async def test_streaming_response_list(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.sessions.with_streaming_response.list() as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            session = await response.parse()
            assert_matches_type(SessionsListResponse, session, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_method_stop(self, async_client: AsyncTogether, live: Live) -> None:
        session = await async_client.post_training.sessions.stop(
            live.fresh_session_id(),
        )
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    async def test_raw_response_stop(self, async_client: AsyncTogether, live: Live) -> None:
        response = await async_client.post_training.sessions.with_raw_response.stop(
            live.fresh_session_id(),
        )

        assert response.is_closed is True
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        session = await response.parse()
        assert_matches_type(Session, session, path=["response"])

    @parametrize
    async def test_streaming_response_stop(self, async_client: AsyncTogether, live: Live) -> None:
        async with async_client.post_training.sessions.with_streaming_response.stop(
            live.fresh_session_id(),
        ) as response:
            assert not response.is_closed
            assert response.http_request.headers.get("X-Stainless-Lang") == "python"

            session = await response.parse()
            assert_matches_type(Session, session, path=["response"])

        assert cast(Any, response.is_closed) is True

    @parametrize
    async def test_path_params_stop(self, async_client: AsyncTogether, live: Live) -> None:
        with pytest.raises(ValueError, match=r"Expected a non-empty value for `session_id` but received ''"):
            await async_client.post_training.sessions.with_raw_response.stop(
                "",
            )
