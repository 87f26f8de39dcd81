"""A sink's run claim (``rlnb.sinks.leases``) for a user with no name: a container run as a uid that ``/etc/passwd``
lacks, with no ``$USER`` (hostile7)."""

import os
import pwd

import pytest

from rlnb.sinks import leases


@pytest.fixture
def nameless(monkeypatch, tmp_path):
    """This process as a uid outside ``/etc/passwd``, with no name in the environment: ``getpass.getuser``'s own
    path, as in ``docker run --user 12345``."""
    for var in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(var, raising=False)

    def unknown(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", unknown)
    monkeypatch.setattr(leases.tempfile, "gettempdir", lambda: str(tmp_path))
    return tmp_path


def test_a_user_with_no_name_still_claims_a_run_and_is_told_of_a_second(nameless):
    """``getpass.getuser``'s ``KeyError`` came out of ``leases.take``: every sink was dropped at its run's start,
    every ``rlnb.export`` failed, for a user whose uid has no name."""
    claim = leases.take("TensorBoard(logdir='/tb')", "run")
    assert claim is not None and claim.fd is not None  # a real lock, across processes
    assert (nameless / f"rlnb-sink-claims-uid{os.getuid()}").is_dir()
    try:
        assert leases.take("TensorBoard(logdir='/tb')", "run") is None  # a second writer of that run is still refused
    finally:
        leases.drop(claim)
