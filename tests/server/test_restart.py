"""`rlnb serve --state-dir`: a restarted server knows its resources, sessions, operations
and checkpoints; sessions that were active end ERROR with the reason, operations in flight FAILED with a
code, and checkpoints can still be downloaded and resumed — after a clean shutdown and after kill -9."""

import signal
import socket
import time

import httpx
import pytest

import rlnb
from rlnb import samples, wire
from rlnb.remote.client import RetryPolicy
from rlnb.server.registry import UNFINISHED
from rlnb.server.state import StateDirLocked
from rlnb.testing import ServerProcess
from tests.support.server import START_DEADLINE, app_client, new_session, running, submit, wait

pytestmark = pytest.mark.slow  # kills and restarts rlnb serve processes

CE = wire.ForwardBackwardBody(
    samples=[samples.cross_entropy(list(b"hello restart"))], loss=wire.LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
).to_json_dict()
ERROR = "TRAINING_SESSION_STATUS_ERROR"


def test_a_restarted_server_keeps_its_registry_and_resumes_its_checkpoints(tmp_path):
    state = tmp_path / "state"
    with app_client(tmp_path / "ckpt", state_dir=state, op_delay=0.2) as c:
        rid, sid = new_session(c)
        submit(c, sid, "forward-backward", CE)
        step = wait(c, sid, "optim-step", submit(c, sid, "optim-step", {}, key="step-1")["id"])
        ckpt = wait(c, sid, "training-checkpoint", submit(c, sid, "training-checkpoint")["id"])
        infer = wait(c, sid, "inference-checkpoint", submit(c, sid, "inference-checkpoint")["id"])
        with pytest.raises(StateDirLocked):  # one server per state directory
            app_client(tmp_path / "other", state_dir=state).__enter__()
        in_flight = [submit(c, sid, "optim-step", {}) for _ in range(5)]
    # the app shut down with operations queued: on restart they are FAILED, the session ERROR
    with app_client(tmp_path / "ckpt", state_dir=state) as c:
        assert c.get(f"/model-resources/{rid}").json()["status"] == wire.ModelResourcesStatus.READY
        view = c.get(f"/training-sessions/{sid}").json()
        assert view["status"] == ERROR and "restarted" in view["error"]["message"]
        assert [x["id"] for x in view["training_checkpoints"]] == [ckpt["output"]["checkpoint"]["id"]]
        kept = c.get(f"/training-sessions/{sid}/operations/optim-step/{step['id']}").json()
        assert kept == step
        ends = [c.get(f"/training-sessions/{sid}/operations/optim-step/{op['id']}").json() for op in in_flight]
        done = [e for e in ends if e["status"] == wire.OperationStatus.COMPLETED]  # and the one running at shutdown
        lost = ends[len(done) :]  # queued at shutdown: however loaded the machine, 5 x 0.2 s do not all fit
        assert done == ends[: len(done)] and lost and all(e["status"] == wire.OperationStatus.FAILED for e in lost)
        assert {e["error"]["code"] for e in lost} == {"TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"}
        assert view["step"] == str(1 + len(done))
        assert submit(c, sid, "optim-step", {}, key="step-1")["id"] == step["id"]  # keys survive too
        listed = {x["id"] for x in c.get("/checkpoints", params={"session_id": sid}).json()["data"]}
        assert listed == {ckpt["output"]["checkpoint"]["id"], infer["output"]["checkpoint"]["id"]}
        files = c.get(
            f"/checkpoints/{infer['output']['checkpoint']['id']}/download",
            params={"variant": "CHECKPOINT_VARIANT_MERGED"},
        ).json()["data"]
        assert c.get(files[0]["url"]).status_code == 200
        resumed = c.post(
            "/training-sessions",
            json={"model_resources_id": rid, "resume_from_checkpoint_id": ckpt["output"]["checkpoint"]["id"]},
        ).json()
        resumed = running(c, resumed["id"])
        assert resumed["status"] == wire.SessionStatus.RUNNING and resumed["step"] == "1"
        nxt = wait(c, resumed["id"], "optim-step", submit(c, resumed["id"], "optim-step", {})["id"])
        assert nxt["output"]["step"] == "2"


def test_kill_9_then_restart_over_the_wire(tmp_path):
    state = str(tmp_path / "state")
    args = ("--device", "cpu", "--state-dir", state, "--op-delay", "0.3")
    first = ServerProcess.rlnb_serve(*args, timeout=START_DEADLINE)
    url = first.start()
    try:
        quick = RetryPolicy(max_retries=1, initial_delay=0.01)
        s = rlnb.connect(url, base_model="rlnb/tiny", record=False, keep_resource=True, retry=quick)
        s.forward_backward([samples.cross_entropy(list(b"kill me"))])
        assert s.optim_step().result(timeout=30).step == 1
        ckpt = s.save_training_checkpoint().result(timeout=30).checkpoint.id
        pending = s.optim_step()
        time.sleep(0.1)
        rid, sid, op_id = s.backend.resource.id, s.id, pending.id
        assert first.proc is not None
        first.proc.kill()  # no shutdown, no flush
        first.proc.wait(10)
        with pytest.raises(rlnb.APIConnectionError):
            s.close()  # the server is gone
    finally:
        first.stop()
    with ServerProcess.rlnb_serve("--device", "cpu", "--state-dir", state, timeout=START_DEADLINE) as url2:
        view = httpx.get(f"{url2}/v1/rl/training-sessions/{sid}").json()
        assert view["status"] == ERROR and "restarted" in view["error"]["message"] and view["step"] == "1"
        env = httpx.get(f"{url2}/v1/rl/training-sessions/{sid}/operations/optim-step/{op_id}").json()
        assert env["error"]["code"] == "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"
        assert env["error"]["message"] == UNFINISHED  # queued or running at the kill (a 0.3 s step, 0.1 s in)
        with rlnb.connect(url2, model_resources_id=rid, resume_from_checkpoint_id=ckpt, record=False) as again:
            assert again.step == 1
            again.forward_backward([samples.cross_entropy(list(b"kill me"))])
            assert again.optim_step().result(timeout=30).step == 2
            upload = httpx.post(f"{url2}/v1/rl/training-sessions/{again.id}/payloads/upload-url").json()
            assert upload["upload_url"].startswith(f"{url2}/v1/rl/payloads/")  # serve's host and port


def test_a_killed_server_without_a_state_dir_has_its_checkpoints_removed_by_the_next_one(tmp_path, monkeypatch):
    """Killed (SIGKILL, out of memory), a server never ran the cleanup of its temporary folder of checkpoints: it
    stayed in /tmp for ever. Its lock went with it, and the next server removes it; a live server's is kept."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    killed = ServerProcess.rlnb_serve("--device", "cpu", timeout=START_DEADLINE)
    with killed, ServerProcess.rlnb_serve("--device", "cpu", timeout=START_DEADLINE):
        folders = set(tmp_path.glob("rlnb-serve-checkpoints-*"))
        assert len(folders) == 2  # the second server kept the first's: it was alive
        assert killed.proc is not None
        killed.proc.kill()
        killed.proc.wait(timeout=60)
        assert set(tmp_path.glob("rlnb-serve-checkpoints-*")) == folders  # its cleanup never ran
        with ServerProcess.rlnb_serve("--device", "cpu", timeout=START_DEADLINE):
            left = set(tmp_path.glob("rlnb-serve-checkpoints-*"))
            assert len(left) == 2 and len(left & folders) == 1  # the killed one's went; the live one's stayed


def test_ctrl_c_stops_the_server_with_one_line_and_removes_its_checkpoints(tmp_path, monkeypatch):
    """Ctrl-C, the way a terminal stops ``rlnb serve``, printed a 30-line KeyboardInterrupt traceback through asyncio
    and uvicorn (which re-raises the signal once it has shut down)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    server = ServerProcess.rlnb_serve("--device", "cpu", timeout=START_DEADLINE)
    server.start()
    try:
        assert server.proc is not None
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(timeout=120) == 130
        log = server.log()
    finally:
        server.stop()
    assert "Traceback" not in log and log.strip().splitlines()[-1] == "rlnb serve: stopped (Ctrl-C)", log
    assert not list(tmp_path.glob("rlnb-serve-checkpoints-*"))


def test_a_client_that_stops_reading_a_download_does_not_hold_the_servers_stop(tmp_path):
    """A download whose client stopped reading (or a connection never closed) kept SIGTERM waiting for ever: uvicorn
    waited for every request in flight without a deadline."""
    server = ServerProcess.rlnb_serve("--device", "cpu", "--checkpoint-dir", str(tmp_path), timeout=START_DEADLINE)
    url = server.start()
    stalled = socket.socket()
    try:
        with httpx.Client(base_url=url + "/v1/rl", timeout=60) as c:
            _, sid = new_session(c)
            ckpt = wait(c, sid, "inference-checkpoint", submit(c, sid, "inference-checkpoint")["id"])
            cid = ckpt["output"]["checkpoint"]["id"]
            with open(tmp_path / cid / "merged" / "big.bin", "wb") as big:  # sparse: more than any socket buffers
                big.truncate(1 << 30)
            links = c.get(f"/checkpoints/{cid}/download", params={"variant": "CHECKPOINT_VARIANT_MERGED"}).json()
        link = httpx.URL(next(f["url"] for f in links["data"] if f["filename"] == "big.bin"))
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect((link.host, link.port))
        stalled.sendall(f"GET {link.raw_path.decode()} HTTP/1.1\r\nHost: {link.host}\r\n\r\n".encode())
        assert stalled.recv(64).startswith(b"HTTP/1.1 200")  # the download began; this client reads no more
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=120) == 0
    finally:
        stalled.close()
        server.stop()


def test_a_server_without_a_state_dir_removes_its_checkpoints_when_it_stops(tmp_path, monkeypatch):
    """Without --state-dir everything lives in memory, checkpoints too: each session's temporary folder
    stayed in /tmp for ever (550 of them, 517 MB, on this project's machine)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the server's temporary folders, where this test can see them
    with ServerProcess.rlnb_serve("--device", "cpu", timeout=START_DEADLINE) as url:
        with rlnb.connect(url, base_model="rlnb/tiny", record=False) as s:
            s.forward_backward([samples.cross_entropy(list(b"keep me a while"))])
            s.optim_step().result(timeout=30)
            s.save_training_checkpoint().result(timeout=30)
        (folder,) = tmp_path.glob("rlnb-serve-checkpoints-*")
        assert list(folder.glob("ckpt-train-*.pt"))  # kept while the server runs: it can still be downloaded
    assert not list(tmp_path.glob("rlnb-serve-checkpoints-*"))
