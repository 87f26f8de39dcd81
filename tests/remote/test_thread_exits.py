"""A ``SystemExit`` (any BaseException) raised on a remote session's send or poll thread, here by a response hook on
the user's own ``http_client``: the thread died in silence (threading ignores SystemExit) and every operation of the
session stayed PENDING, past ``operation_timeout``, which the dead poller enforced."""

from __future__ import annotations

import threading

import pytest

import rlnb
from rlnb import samples
from tests.support.server import app_client

BATCH = [samples.cross_entropy([1, 2, 3])]


@pytest.mark.parametrize(("method", "thread"), [("POST", "rlnb-send-"), ("GET", "rlnb-poll-")])
def test_a_hook_that_exits_on_a_sessions_thread_fails_that_operation_and_the_session_goes_on(tmp_path, method, thread):
    with app_client(tmp_path, op_delay=0.2) as c:
        s = rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=c, record=False)
        armed = [1]

        def hook(response):
            if armed and response.request.method == method and "/operations/" in str(response.request.url):
                armed.clear()
                raise SystemExit(3)

        c.event_hooks["response"].append(hook)
        with pytest.raises(rlnb.OperationFailed, match="SystemExit: 3"):
            s.forward_backward(BATCH).result(20)
        assert any(t.name.startswith(thread) for t in threading.enumerate())  # it lives on
        assert s.optim_step().result(20).step == 1  # the session still works
        s.close()
