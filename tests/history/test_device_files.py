"""A file rlnb reads whole from its folders (a sweep's ``sweep.json``, a server's ``signing.key``) that is a link to a
device: refused naming it, as a named pipe is (``locks.refuse_pipe``). ``/dev/zero`` never ends: it was read into
memory until the process ran out. Each call runs in a child process held to 1 GiB, so that a regression fails
(a ``MemoryError``) instead of taking the machine's memory."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,  # a child process
    pytest.mark.skipif(not Path("/dev/zero").is_char_device() or sys.platform != "linux", reason="Linux's /dev/zero"),
]
CALLS = {
    "sweep.json": "from rlnb.sweep.folder import begin; begin(FOLDER, {'steps': 2}, resume=True)",
    "signing.key": "from rlnb.server.state import Journal; Journal(FOLDER).signing_key()",
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_file_read_whole_that_is_a_link_to_a_device_is_refused_naming_it(tmp_path, name):
    (tmp_path / name).symlink_to("/dev/zero")
    code = (
        "import resource, sys; from pathlib import Path\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))\n"
        f"FOLDER = Path({str(tmp_path)!r})\n"
        f"try:\n    {CALLS[name]}\nexcept Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert f"{tmp_path / name} is a device, not a file" in done.stdout, (done.stdout, done.stderr[-2000:])
