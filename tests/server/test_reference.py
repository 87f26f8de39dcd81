"""Where `rlnb serve` strayed from the API reference (R-new), each now as the reference says."""

import math
import shutil
import threading
import time
from collections.abc import Iterator

import pytest
import torch
from fastapi.testclient import TestClient

import rlnb
from rlnb import samples, wire
from rlnb.server import create_app
from tests.support.server import DEADLINE, app_client, new_session, running, submit, wait


@pytest.fixture(scope="module")
def c(tmp_path_factory) -> Iterator[TestClient]:
    with app_client(tmp_path_factory.mktemp("ckpt")) as client:
        yield client


def test_a_status_filter_of_unspecified_is_a_400_not_an_empty_list(c):
    """The list filter's statuses omit UNSPECIFIED (no session is ever in it): ``?status=..._UNSPECIFIED``
    answered an empty list, as a misspelt status used to."""
    running, unspecified = wire.SessionStatus.RUNNING, wire.SessionStatus.UNSPECIFIED
    r = c.get("/training-sessions", params={"status": f"{running},{unspecified}"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "status" and f"{unspecified.value!r} is not" in err["message"]
    assert running in err["message"] and f"{unspecified}," not in err["message"]  # not offered as a choice
    assert c.get("/training-sessions", params={"status": running}).status_code == 200


def test_an_empty_string_clears_a_label_at_create_and_in_metadata(c):
    """ "Empty strings clear": a PATCH of ``metadata.wandb.url: ""`` kept ``"url": ""``, and a session created
    with ``display_name: ""`` showed ``""`` where a PATCH of the same cleared it (proto3 has no empty string
    apart from unset)."""
    rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
    made = c.post(
        "/training-sessions",
        json={"model_resources_id": rid, "display_name": "", "metadata": {"wandb": {"project": "p", "group": ""}}},
    )
    assert made.status_code == 200, made.text
    session = running(c, made.json()["id"])  # built: its updated_at moves no more but by a change
    assert session["display_name"] is None
    assert session["metadata"]["wandb"]["project"] == "p" and session["metadata"]["wandb"]["group"] is None
    patched = c.patch(f"/training-sessions/{session['id']}", json={"metadata": {"wandb": {"project": "p", "url": ""}}})
    assert patched.status_code == 200, patched.text
    assert patched.json()["metadata"]["wandb"] == {
        "entity": None, "group": None, "project": "p", "run_id": None, "run_name": None, "url": None,
    }  # fmt: skip
    assert patched.json()["updated_at"] == session["updated_at"]  # nothing changed


def test_a_metadata_patch_changes_the_fields_it_names_and_keeps_the_others(c):
    """ "Omitted fields remain unchanged": a PATCH of ``metadata.wandb.url`` alone replaced the whole metadata, so the
    W&B project and entity set at create were lost without a word."""
    rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
    wandb = {"project": "p", "entity": "team", "url": "http://u"}
    sid = c.post("/training-sessions", json={"model_resources_id": rid, "metadata": {"wandb": wandb}}).json()["id"]
    cleared = c.patch(f"/training-sessions/{sid}", json={"metadata": {"wandb": {"url": ""}}}).json()["metadata"]
    assert cleared["wandb"] == {"entity": "team", "group": None, "project": "p", "run_id": None, "run_name": None,
                                "url": None}  # fmt: skip
    named = c.patch(f"/training-sessions/{sid}", json={"metadata": {"wandb": {"run_name": "r"}}}).json()["metadata"]
    assert (named["wandb"]["project"], named["wandb"]["entity"], named["wandb"]["run_name"]) == ("p", "team", "r")
    assert c.patch(f"/training-sessions/{sid}", json={"metadata": {}}).json()["metadata"] == named
    assert c.get(f"/training-sessions/{sid}").json()["metadata"] == named


def test_positions_outside_the_loss_come_back_as_zero_not_minus_zero(c):
    """``loss_fn_outputs`` logprobs at positions the loss excludes "come back as 0": they came back ``-0.0``
    (a log-prob times a zero mask), which a client comparing the JSON, or dividing by it, tells from 0."""
    _, sid = new_session(c)
    sample = samples.cross_entropy([1, 2, 3, 4], weights=[0.0, 0.0, 1.0, 0.5])
    body = {"samples": [sample.to_json_dict()], "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"},
            "return_loss_fn_outputs": True, "forward_only": True}  # fmt: skip
    env = wait(c, sid, "forward-backward", submit(c, sid, "forward-backward", body)["id"])
    data = env["output"]["loss_fn_outputs"][0]["tensors"]["logprobs"]["data"]
    assert data[0] == 0 and math.copysign(1.0, data[0]) == 1.0, data  # +0.0
    assert data[1] < 0 and data[2] < 0  # a fractional weight still counts: its log-prob whole


class NoFive(torch.nn.Module):
    """A model that gives token 5 probability 0 (its logit is -inf, as a banned or masked token's)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.head = torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.emb(idx))
        return logits.masked_fill(torch.arange(16) == 5, -math.inf)


def test_a_log_prob_of_minus_infinity_reaches_a_remote_client_as_the_local_engine_gives_it(tmp_path):
    """A prompt token of probability 0 has log-prob -inf: in process, ``float("-inf")``; over ``rlnb serve`` every GET
    of the sample was a 500 ("Out of range float values are not JSON compliant") and the client's wait failed. Now
    the wire spells it ``"-Infinity"`` (protobuf JSON) and the client reads ``float("-inf")`` back."""
    ask = {"max_tokens": 2, "prompt_logprobs": True, "topk_prompt_logprobs": 16}
    with rlnb.connect("local", model=NoFive(), device="cpu", record=False) as s:
        local = s.sample([[1, 5, 2]], **ask).result().results[0]
    with (
        app_client(tmp_path, models={"x/no-five": NoFive()}) as c,
        rlnb.connect("http://testserver", base_model="x/no-five", http_client=c, record=False) as s,
    ):
        op = s.sample([[1, 5, 2]], **ask)
        remote = op.result(DEADLINE).results[0]
        raw = c.get(f"/training-sessions/{s.info().id}/operations/sample/{op.envelope.id}").json()
    assert local.prompt_logprobs[1] == -math.inf and local.topk_prompt_logprobs[1].logprobs[-1] == -math.inf
    assert remote.prompt_logprobs == local.prompt_logprobs
    assert remote.topk_prompt_logprobs == local.topk_prompt_logprobs
    result = raw["output"]["results"][0]
    assert result["prompt_logprobs"][1] == "-Infinity"
    assert result["topk_prompt_logprobs"][1]["logprobs"][-1] == "-Infinity"


def test_a_forward_backward_over_a_banned_prompt_token_of_weight_0_completes():
    """The same model, trained on [1, 5, 2, 3] with token 5 at weight 0: its log-prob -inf made the loss NaN and the
    step failed NON_FINITE_LOSS, though the token does not count."""
    with rlnb.connect("local", model=NoFive(), device="cpu", record=False) as s:
        out = s.forward_backward([samples.cross_entropy([1, 5, 2, 3], [0, 0, 1, 1])]).result(DEADLINE)
    assert math.isfinite(out.loss)


@pytest.mark.parametrize("lora", [None, pytest.param(True, marks=pytest.mark.slow)])  # LoRA: peft
def test_sessions_of_a_served_module_each_train_their_own_copy(tmp_path, lora):
    """``create_app(models={"x": module})`` gave that one module to every session: one session's optim-step moved
    the others' model (and the served module), and a second LoRA session was refused, the module "adapted in place by
    an earlier LoRA session"."""
    served = NoFive()
    before = {k: v.clone() for k, v in served.state_dict().items()}
    batch = [samples.cross_entropy([1, 2, 3, 4])]
    with app_client(tmp_path, models={"x/no-five": served}) as c:
        connect = dict(base_model="x/no-five", http_client=c, record=False, lora=lora)
        with rlnb.connect("http://testserver", **connect) as a, rlnb.connect("http://testserver", **connect) as b:
            untrained = b.forward_backward(batch, forward_only=True).result(DEADLINE).loss
            for _ in range(3):
                a.forward_backward(batch)
                a.optim_step(rlnb.AdamParams(learning_rate=0.1)).result(DEADLINE)
            assert a.forward_backward(batch, forward_only=True).result(DEADLINE).loss < untrained  # a trained
            assert b.forward_backward(batch, forward_only=True).result(DEADLINE).loss == untrained  # b did not move
    assert all(torch.equal(before[k], v) for k, v in served.state_dict().items())


def test_a_stop_with_an_operation_running_answers_stopping_and_holds_the_slot_until_it_ends(tmp_path, monkeypatch):
    """A stop while an optim-step ran answered STOPPED at once, freed the resource's one slot, and the session's
    step then moved to 1 under that STOPPED. Now it is STOPPING until its backend is let go (the running operation
    finished): a new session on the resource is a 429 meanwhile, and then the session is STOPPED with its step. A
    server restarted from the journal of that moment (its model gone) has it STOPPED."""
    state = tmp_path / "state"
    with app_client(tmp_path / "ckpt", state_dir=state, op_delay=DEADLINE) as c:  # the stop ends the delay
        rid, sid = new_session(c)  # full weights: one session per resource
        registry = c.app.state.registry
        backend, gate = registry.session(sid).backend, threading.Event()
        close = backend.close
        monkeypatch.setattr(backend, "close", lambda: (gate.wait(DEADLINE), close()))  # held until the test says
        running = submit(c, sid, "optim-step", {})
        queued = submit(c, sid, "optim-step", {})
        path, until = f"/training-sessions/{sid}/operations/optim-step/{running['id']}", time.monotonic() + DEADLINE
        while c.get(path).json()["status"] != wire.OperationStatus.RUNNING:  # in its delay
            assert time.monotonic() < until
            time.sleep(0.01)
        stopped = c.post(f"/training-sessions/{sid}/stop").json()
        assert stopped["status"] == wire.SessionStatus.STOPPING, stopped["status"]
        assert c.post("/training-sessions", json={"model_resources_id": rid}).status_code == 429
        shutil.copytree(state, tmp_path / "copy", ignore=shutil.ignore_patterns("*.lock"))
        with app_client(tmp_path / "ckpt2", state_dir=tmp_path / "copy") as restarted:
            assert restarted.get(f"/training-sessions/{sid}").json()["status"] == wire.SessionStatus.STOPPED
        late = wait(c, sid, "optim-step", submit(c, sid, "optim-step", {})["id"])
        assert late["error"]["code"] == wire.OperationErrorCode.SESSION_NOT_ACTIVE
        gate.set()
        assert registry.settle(DEADLINE)
        assert wait(c, sid, "optim-step", running["id"])["output"]["step"] == "1"
        assert wait(c, sid, "optim-step", queued["id"])["error"]["code"] == wire.OperationErrorCode.SESSION_NOT_ACTIVE
        view = c.get(f"/training-sessions/{sid}").json()
        assert (view["status"], view["step"]) == (wire.SessionStatus.STOPPED, "1")
        assert view["updated_at"] > stopped["updated_at"]
        assert c.post("/training-sessions", json={"model_resources_id": rid}).status_code == 200


def test_an_unexpected_error_is_a_500_with_the_apis_error_body(tmp_path, monkeypatch):
    """R-Apr declares every RL endpoint's ``default`` response as ``ErrorData``; an exception no route raised on
    purpose (a bug) was Starlette's plain-text "Internal Server Error", which no client reads as the API's error. Its
    text is not sent (it may hold a path); its type is, and the server's log has the traceback."""
    app = create_app(device="cpu", checkpoint_dir=tmp_path)

    def broken(model_resources_id: str) -> None:
        raise RuntimeError(f"{tmp_path}/registry.jsonl is locked")

    monkeypatch.setattr(app.state.registry, "resource", broken)
    with TestClient(app, base_url="http://testserver/v1/rl", raise_server_exceptions=False) as c:
        r = c.get("/model-resources/mr-1")
        assert r.status_code == 500 and r.headers["content-type"] == "application/json", r.text
        err = r.json()["error"]
        assert err["type"] == "server_error" and err["param"] is None and err["code"] is None
        assert "RuntimeError" in err["message"] and str(tmp_path) not in err["message"]
        assert c.get("/supported-models").status_code == 200  # the server goes on
