"""A real IPython kernel of this venv, driven as a notebook front end drives it: the live view tests' outputs, display
ids and cell ids are read from what it publishes."""

import contextlib
import json
import os
import sys
from pathlib import Path

KERNEL_SETUP = """
from IPython.display import display
from rlnb.history import History
from rlnb.viz import live, openviews
h = History()
"""


@contextlib.contextmanager
def kernel(tmp_path):
    """A real IPython kernel of this venv; yields ``run(code, cell=None, ask=None)``, which executes ``code`` as a
    front end would (``cell``: the cell id sent in the request's metadata, none when ``None``) and returns the
    outputs it published (``(msg_type, content)``) and the value of the expression ``ask``. ``run.manager`` is the
    kernel's manager: ``run.manager.shutdown_kernel(now=False)`` shuts it down as Jupyter's Shut Down does."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    root = str(Path(__file__).parents[2])  # the repository
    spec = tmp_path / "kernels" / "rlnb-test"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]  # this venv's Python
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "rlnb test", "language": "python"}))
    specs = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    manager = KernelManager(kernel_name="rlnb-test", kernel_spec_manager=specs)
    manager.start_kernel(env={**os.environ, "PYTHONPATH": root, "MPLBACKEND": "Agg"})
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)

        def run(code, cell=None, ask=None):
            content = {"code": code, "silent": False, "store_history": True, "allow_stdin": False,
                       "user_expressions": {"r": ask} if ask else {}, "stop_on_error": True}  # fmt: skip
            msg = client.session.msg("execute_request", content, metadata={"cellId": cell} if cell else {})
            client.shell_channel.send(msg)
            mine = msg["header"]["msg_id"]
            while True:
                reply = client.get_shell_msg(timeout=120)
                if reply["parent_header"].get("msg_id") == mine:
                    break
            assert reply["content"]["status"] == "ok", reply["content"]
            outputs = []
            while True:  # the kernel is idle once it has published every output of this request
                out = client.get_iopub_msg(timeout=120)
                if out["parent_header"].get("msg_id") != mine:
                    continue
                if out["msg_type"] == "status" and out["content"]["execution_state"] == "idle":
                    break
                if out["msg_type"] in ("display_data", "update_display_data", "execute_result"):
                    outputs.append((out["msg_type"], out["content"]))
            answer = reply["content"]["user_expressions"]["r"]["data"]["text/plain"] if ask else None
            return outputs, answer

        run.manager = manager  # type: ignore[attr-defined]
        run(KERNEL_SETUP)
        yield run
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
