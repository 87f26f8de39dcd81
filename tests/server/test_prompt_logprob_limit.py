"""The prompt log-probs one sample returns, capped (``max_prompt_logprobs``): 512 prompts of 255 tokens with
``prompt_logprobs`` and ``topk_prompt_logprobs=20`` — a 0.6 MB body within every other limit — answered 65 MB of JSON
and kept about 300 MB of the server's memory per request (the output is kept with the operation: 408, 1,051, 1,390,
1,600 MB after three), and a 65 MB line in ``--state-dir``'s journal."""

import uuid

from rlnb import wire
from rlnb.server.settings import parse_limits
from tests.support.server import app_client, new_session, submit, wait


def prompt_logprobs_body(prompts: int, length: int, topk: int) -> dict:
    prompt = wire.ModelInput.from_tokens([7] * length).to_json_dict()
    return {"model_inputs": [prompt] * prompts, "num_samples": 2, "prompt_logprobs": True,
            "topk_prompt_logprobs": topk, "sampling_params": {"max_tokens": 1}}  # fmt: skip


def test_the_prompt_logprobs_a_sample_returns_are_capped(tmp_path):
    with app_client(tmp_path, max_prompt_logprobs=1000) as c:
        _, sid = new_session(c)
        ops = f"/training-sessions/{sid}/operations/sample"
        r = c.post(ops, json=prompt_logprobs_body(4, 50, 5), headers={"Idempotency-Key": str(uuid.uuid4())})
        err = r.json()["error"]
        assert r.status_code == 400 and err["param"] == "topk_prompt_logprobs"
        assert "200 prompt tokens x (1 + topk_prompt_logprobs 5) = 1200 prompt log-probs" in err["message"]
        assert "the limit is 1000 per request (max_prompt_logprobs)" in err["message"]
        ok = prompt_logprobs_body(4, 50, 4)  # 200 x 5 = 1000; num_samples does not count: they are the prompts'
        assert wait(c, sid, "sample", submit(c, sid, "sample", ok)["id"])["status"] == wire.OperationStatus.COMPLETED
        plain = {**prompt_logprobs_body(40, 50, 0), "prompt_logprobs": False}  # none asked: no limit
        assert wait(c, sid, "sample", submit(c, sid, "sample", plain)["id"])["status"] == wire.OperationStatus.COMPLETED
    assert parse_limits(["max_prompt_logprobs=5e6"]) == {"max_prompt_logprobs": 5_000_000}
