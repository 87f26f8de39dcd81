"""``APIClient``'s checkpoint, session-update and model-resource calls against the real ``rlnb serve`` app: a
checkpoint saved by a session is listed, got and downloaded byte for byte, the key going to the API only."""

import time

import pytest

import rlnb
from rlnb import wire
from rlnb.remote.client import APIClient
from tests.support.server import DEADLINE, app_client

pytestmark = pytest.mark.slow  # the app builds a model for its session

TOKEN = "t-secret-token"


def settled(get, done) -> object:
    """``get()`` once ``done`` holds for it, within the test deadline."""
    deadline = time.monotonic() + DEADLINE
    while not done(got := get()):
        assert time.monotonic() < deadline, f"still {got!r}"
        time.sleep(0.01)
    return got


def test_a_saved_checkpoint_is_listed_got_and_downloaded_whole(tmp_path):
    sent = []
    with app_client(tmp_path / "ckpt", public_url="http://testserver", token=TOKEN) as http:
        http.event_hooks["request"].append(lambda r: sent.append((r.url.path, "Authorization" in r.headers)))
        with pytest.warns(rlnb.CleartextKeyWarning, match="testserver"):  # a token over http:// to another host
            c = APIClient("http://testserver", TOKEN, http_client=http)
        request = wire.CreateModelResourcesRequest(base_model="rlnb/tiny", lora_enabled=True)
        assert c.estimate_cost(request).currency == "USD"
        rid = c.create_model_resources(request).id
        sid = c.create_session(wire.StartTrainingSessionRequest(model_resources_id=rid)).id
        settled(lambda: c.get_session(sid), lambda s: s.status != wire.SessionStatus.CREATING)
        renamed = c.update_session(sid, display_name="renamed", metadata={"wandb": {"project": "p"}})
        assert renamed.display_name == "renamed" and renamed.metadata.wandb.project == "p"
        kind = wire.OperationKind.INFERENCE_CHECKPOINT
        op = c.submit_operation(sid, kind, None)
        done = settled(lambda: c.get_operation(sid, kind, op.id), lambda e: e.status in wire.TERMINAL_STATUSES)
        cid = done.output.checkpoint.id
        before = c.get_model_resources(rid).expires_at
        assert c.extend_expiry(rid, 86400).expires_at > before

        listed = c.list_checkpoints(session_id=sid, type="CHECKPOINT_TYPE_INFERENCE", limit=1)
        assert [k.id for k in listed.data] == [cid] and not listed.meta.has_more
        assert c.list_checkpoints(session_id=sid, type="CHECKPOINT_TYPE_TRAINING").data == []
        assert c.get_checkpoint(cid).lora_rank is not None
        for variant, kind_dir in [("CHECKPOINT_VARIANT_MERGED", "merged"), ("CHECKPOINT_VARIANT_ADAPTER", "adapter")]:
            paths = c.download_checkpoint(cid, tmp_path / "out" / kind_dir, variant=variant)
            served = http.app.state.registry.checkpoints[cid].path / kind_dir
            assert sorted(p.name for p in paths) == sorted(f.name for f in served.iterdir()) and paths
            assert all(p.read_bytes() == (served / p.name).read_bytes() for p in paths)
        assert sorted(p.name for p in (tmp_path / "out").rglob(".*")) == []  # no partial file left
        kind = wire.OperationKind.TRAINING_CHECKPOINT
        op = c.submit_operation(sid, kind, None)
        done = settled(lambda: c.get_operation(sid, kind, op.id), lambda e: e.status in wire.TERMINAL_STATUSES)
        with pytest.raises(rlnb.BadRequestError, match="only inference checkpoints"):
            c.download_checkpoint(done.output.checkpoint.id, tmp_path / "no")
        c.stop_model_resources(rid, force=True)  # its session still runs
    files = [(path, auth) for path, auth in sent if "/files/" in path]
    assert files and not any(auth for _, auth in files)  # presigned: no key
    assert all(auth for path, auth in sent if "/files/" not in path)
