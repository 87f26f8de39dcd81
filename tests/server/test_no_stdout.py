"""``rlnb.server.serve()`` in a process whose ``sys.stdout`` is None (pythonw, a program embedding Python): uvicorn
chose its log colours from ``sys.stdout.isatty()`` and failed to start (``Unable to configure formatter
'default'``). ``rlnb serve`` with its output closed is ``tests/test_cli_hangup.py``'s."""

import io
import sys

import pytest

from rlnb.server.app import uvicorn_config
from rlnb.server.settings import ServerSettings


def test_the_servers_settings_are_made_where_sys_stdout_is_none(monkeypatch):
    monkeypatch.setattr(sys, "stdout", None)
    config = uvicorn_config(lambda scope, receive, send: None, "127.0.0.1", 0, ServerSettings(device="cpu"))
    assert config.use_colors is False


class _Terminal:
    """A stderr that is a terminal."""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return len(text)


@pytest.mark.parametrize(
    ("terminal", "env", "coloured"),
    [(True, {}, True), (False, {}, False), (True, {"NO_COLOR": "1"}, False), (True, {"TERM": "dumb"}, False)],
    ids=["terminal", "file", "no-color", "dumb"],
)
def test_the_logs_colours_follow_stderr_and_the_users_wishes(terminal, env, coloured, monkeypatch):
    """uvicorn chose its colours from ``sys.stdout.isatty()`` although its log goes to stderr: ``rlnb serve
    2>serve.log`` from a terminal wrote escapes into the file, even with ``NO_COLOR`` set or ``TERM=dumb``."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "stderr", _Terminal() if terminal else io.StringIO())
    monkeypatch.setattr(sys, "stdout", _Terminal())  # stdout's terminal decides nothing
    config = uvicorn_config(lambda scope, receive, send: None, "127.0.0.1", 0, ServerSettings(device="cpu"))
    assert config.use_colors is coloured
