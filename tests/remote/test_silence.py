"""``APIClient.silence``: a server that stops answering is known from the first failed attempt (not after a call's
retries, ~15 s), any answer clears it, and ``call_off`` (a RunPanel's Stop) ends the wait before each retry until the
next answer: the call raises its last error at once, saying why."""

import threading
import time

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from rlnb.remote.silence import CALLED_OFF
from tests.support.fake_api import BASE, KEY


def test_a_silent_server_is_known_at_its_first_failure_and_a_call_off_ends_the_retries():
    answering = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        if not answering.is_set():
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(400, json={"error": {"message": "no"}})  # not retried

    with APIClient(BASE, KEY, transport=httpx.MockTransport(handler), max_retries=20) as client:
        assert client.silence.now() is None
        failed: list[BaseException] = []

        def call() -> None:
            try:
                client.supported_models()
            except rlnb.APIConnectionError as exc:
                failed.append(exc)

        thread = threading.Thread(target=call)
        thread.start()
        end = time.monotonic() + 30
        while client.silence.now() is None:  # the first attempt's failure, its retries to come
            assert time.monotonic() < end
            time.sleep(0.01)
        seconds, said = client.silence.now()
        assert seconds >= 0 and "ConnectError: connection refused" in said and thread.is_alive()
        client.silence.call_off()
        thread.join(30)
        assert not thread.is_alive() and len(failed) == 1 and str(failed[0]).endswith(CALLED_OFF)
        answering.set()  # an answer, an error status too: the server is there, and retries wait again
        with pytest.raises(rlnb.APIStatusError):
            client.supported_models()
        assert client.silence.now() is None and not client.silence.wait(0.0)
