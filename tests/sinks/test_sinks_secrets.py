"""Secrets a sink is given (a Trackio server's write token, a webhook's URL) never in what rlnb shows."""

from __future__ import annotations

import pytest

import rlnb
from rlnb import sinks
from rlnb.sinks import stream
from rlnb.testing import FakeBackend
from tests.support.sink_tests import CE, Flaky, env, pytestmark  # noqa: F401 - env: libraries' state in a temp folder

TOKEN = "wt-8c1f0e2d9b7a4c55"
HOOK = "https://hooks.slack.com/services/T0000/B0000/XyZsecretHookPath"


def test_two_trackio_sinks_of_one_place_are_refused_without_their_write_token_or_webhook():
    """Two Trackio sinks of one project on one server were refused naming ``Trackio(project=..., server_url=
    'http://host/?write_token=<token>', webhook_url='<Slack URL>')``: Trackio's write token and the webhook's secret
    path, whole. The refusal names the project and the server, the token as ``***``; a webhook is no part of the
    place (nor are ``init``'s other options: one sink with ``embed=True`` is the same place)."""
    server = f"http://trackio.example:7860/?project=p&write_token={TOKEN}"

    def trackio(**init: object) -> sinks.Trackio:
        return sinks.Trackio("p", server_url=server, process=True, **init)  # process: Trackio not imported here

    with pytest.raises(ValueError) as raised:
        stream.validate([trackio(webhook_url=HOOK), trackio(embed=True)])
    said = str(raised.value)
    assert TOKEN not in said and "XyZsecretHookPath" not in said, said
    assert "Trackio(project='p', server_url='http://trackio.example:7860/?project=p&write_token=***')" in said, said


def test_a_sink_error_quoting_a_url_with_a_token_never_shows_the_token(tmp_path):
    """A library's error that quotes its server's URL whole, ``?write_token=`` and all (Trackio's requests to a
    self-hosted server that is down): the token reached the SinkWarning, the sink's repr and ``export``'s SinkError.
    It is ``***`` in each."""
    url_error = ConnectionError(f"HTTPConnectionPool(host='h', port=1): Max retries exceeded with url: "
                                f"/api/log?write_token={TOKEN}&run=r (Connection refused)")  # fmt: skip
    with rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r") as session:
        session.forward_backward(CE)
        session.optim_step().result()
    with pytest.raises(sinks.SinkError) as raised:
        rlnb.export(session.history, Flaky(1, url_error))
    shown = [str(raised.value), repr(raised.value.__cause__)]
    live = Flaky(1, url_error, interval=0)
    with pytest.warns(sinks.SinkWarning) as caught, rlnb.Session(FakeBackend(), record=False, sinks=[live]) as session:
        session.forward_backward(CE)
        session.optim_step().result()
    shown += [str(w.message) for w in caught] + [repr(live), repr(live.error)]
    assert all(TOKEN not in s and "/api/log?write_token=***&run=r" in s for s in shown), shown
