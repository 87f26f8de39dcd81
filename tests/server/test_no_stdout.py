"""``rlnb.server.serve()`` in a process whose ``sys.stdout`` is None (pythonw, a program embedding Python): uvicorn
chose its log colours from ``sys.stdout.isatty()`` and failed to start (``Unable to configure formatter
'default'``). ``rlnb serve`` with its output closed is ``tests/test_cli_hangup.py``'s."""

import sys

from rlnb.server.app import uvicorn_config
from rlnb.server.settings import ServerSettings


def test_the_servers_settings_are_made_where_sys_stdout_is_none(monkeypatch):
    monkeypatch.setattr(sys, "stdout", None)
    config = uvicorn_config(lambda scope, receive, send: None, "127.0.0.1", 0, ServerSettings(device="cpu"))
    assert config.use_colors is False
