"""What ``rlnb demo`` and ``rlnb serve`` say where their stdout cannot take what they print (a full disk, an encoding
without a character of a name), and a demo stopped before it made its run folder: no claim on an earlier one's."""

import errno
import io
import signal

import pytest

import rlnb.engine.backend
from rlnb.cli import main
from rlnb.cli.demo.stops import Terminated

pytestmark = pytest.mark.slow  # each builds the tiny model (~2 s); the demos train a step


class _Disk(io.RawIOBase):
    """A stdout on a disk that is full until ``full`` is False (``>/dev/full``)."""

    full = True

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return len(data)


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), Terminated(signal.SIGTERM)], ids=["ctrl-c", "sigterm"])
def test_a_demo_stopped_before_its_session_claims_no_steps_of_an_earlier_demo(stop, tmp_path, monkeypatch, capsys):
    """It said "the steps so far are in OUT/run" of the earlier, completed demo's run, which it never touched."""
    demo = ["demo", "--steps", "1", "--device", "cpu", "--out", str(tmp_path)]
    assert main(demo) == 0
    ops = (tmp_path / "run" / "ops.jsonl").read_bytes()

    def stopped(*args, **kwargs):
        raise stop

    monkeypatch.setattr(rlnb.engine.backend, "LocalBackend", stopped)
    capsys.readouterr()
    assert main(demo) in (130, 143)
    err = capsys.readouterr().err
    assert err in ("rlnb demo: interrupted\n", "rlnb demo: stopped (SIGTERM)\n"), err
    assert (tmp_path / "run" / "ops.jsonl").read_bytes() == ops


def test_a_demo_whose_stdout_cannot_encode_its_folders_name_completes(tmp_path, monkeypatch, capsys):
    """``PYTHONIOENCODING=ascii rlnb demo --out ü9`` wrote every file, then exited 2, as for a refused option."""
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr("sys.stdout", stdout)
    out = tmp_path / "ü9"
    assert main(["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]) == 0
    stdout.flush()
    assert f"wrote {tmp_path}/\\xfc9/history.csv".encode() in stdout.buffer.getvalue()
    assert (out / "history.csv").is_file() and not capsys.readouterr().err


@pytest.mark.parametrize("command", ["demo", "serve"])
def test_a_stdout_on_a_full_disk_is_named_in_one_line(command, tmp_path, monkeypatch, capsys):
    """``rlnb serve >/dev/full`` printed a traceback; the demo's "[Errno 28] No space left on device" named no file,
    read as --out's disk."""
    disk = _Disk()
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(io.BufferedWriter(disk), encoding="utf-8"))
    argv = {
        "demo": ["demo", "--steps", "1", "--device", "cpu", "--out", str(tmp_path)],
        "serve": ["serve", "--device", "cpu", "--port", "0"],
    }[command]
    try:
        assert main(argv) == 1
    finally:
        disk.full = False  # its buffer flushed when it is collected
    said = f"rlnb {command}: [Errno 28] cannot write to stdout: No space left on device"
    kept = f"; the steps so far are in {tmp_path / 'run'} (rlnb.History.load)" if command == "demo" else ""
    assert capsys.readouterr().err == f"{said}{kept}\n"
