"""``rlnb serve --model NAME=PATH``: Hugging Face models behind the Together API, driven by the official
SDK and by rlnb's own client, offline."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import rlnb
from rlnb.tasks import digits_task, rl_step
from tests.support.server import running_server

together = pytest.importorskip("together")
transformers = pytest.importorskip("transformers")
from together import Together  # noqa: E402
from together.post_training import ModelResourcesClient, download_checkpoint  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]  # Hugging Face models behind rlnb serve in a subprocess
POLL = 0.01


@pytest.fixture(scope="module")
def hf_server(hf_dirs, tmp_path_factory) -> Iterator[str]:
    models = [arg for arch, path in hf_dirs.items() for arg in ("--model", f"tiny/{arch}={path}")]
    with running_server(*models, tmp_dir=str(tmp_path_factory.mktemp("ckpt"))) as url:
        yield url


@pytest.fixture(autouse=True)
def _sdk_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("TOGETHER_API_KEY", "TOGETHER_BASE_URL", "TOGETHER_PROJECT_ID"):
        monkeypatch.delenv(var, raising=False)


def chunk(ids: list[int]) -> dict[str, Any]:
    return {"chunks": [{"encoded_text": {"tokens": ids}}]}


def test_supported_models_lists_the_served_models(hf_server):
    with Together(api_key="k", base_url=hf_server, max_retries=0, _strict_response_validation=True) as c:
        models = {m.base_model: m for m in c.post_training.supported_models.get().data}
    assert {"rlnb/tiny", "rlnb/small", "tiny/gpt2", "tiny/llama", "tiny/qwen3"} <= set(models)
    assert models["tiny/llama"].compute_configs[0].generator_config.context_length == 256


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen3"])
def test_the_sdk_runs_a_grpo_loop_on_each_architecture(hf_server, hf_dirs, tmp_path, arch):
    tok = transformers.AutoTokenizer.from_pretrained(hf_dirs[arch])
    prompts = [tok.encode("n="), tok.encode("the answer is")]
    with (
        ModelResourcesClient.create(
            api_key="k", base_url=hf_server, base_model=f"tiny/{arch}", lora_enabled=True,
            optimizer_config={"adam": {}}, interval=POLL, ready_timeout=30,
        ) as mr,
        mr.create_session(lora_config={"rank": 4, "alpha": 8}, interval=POLL, timeout=60) as session,
    ):  # fmt: skip
        for step in range(2):
            batch = []
            for ids in prompts:
                out = session.generator.sample(chunk(ids), 4, {"max_tokens": 6, "seed": step}, interval=POLL)
                texts = [tok.decode([int(t) for t in q.tokens]) for q in out.sequences]
                rewards = [sum(c.isdigit() for c in t) / max(len(t), 1) for t in texts]
                mean = statistics.fmean(rewards)
                for q, r in zip(out.sequences, rewards, strict=True):
                    sample = rlnb.samples.policy(ids, [int(t) for t in q.tokens], q.logprobs, r - mean)
                    batch.append(sample.to_json_dict())
            fb = session.trainer.forward_backward(samples=batch, loss={"type": "LOSS_TYPE_GRPO"}, interval=POLL)
            assert fb.loss == fb.loss
            assert int(session.trainer.optim_step(adam_params={"learning_rate": 1e-3}, interval=POLL).step) == step + 1
            assert int(session.trainer.weights_sync(interval=POLL).weights_version) == step + 1
        infer = session.create_inference_checkpoint(interval=POLL)
        with Together(api_key="k", base_url=hf_server, max_retries=0) as c:
            files = download_checkpoint(c, infer.id, variant="CHECKPOINT_VARIANT_MERGED", output_dir=tmp_path)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {f.name for f in files}
    merged = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    assert merged.get_output_embeddings().weight.shape[0] == 320


def test_rlnb_client_with_the_tokenizer_runs_the_demo_task(hf_server, hf_dirs):
    with rlnb.connect(hf_server, base_model="tiny/qwen3", optimizer="adam", lora={"rank": 4},
                      tokenizer=hf_dirs["qwen3"], record=False) as s:  # fmt: skip
        report = rl_step(s, digits_task(), rlnb.AdamParams(learning_rate=1e-2), seed=0)
        assert report.status == "TRAINING_OPERATION_STATUS_COMPLETED" and 0 <= report.reward <= 1
        seq = s.sample("n=", max_tokens=5, seed=1).result().results[0].sequences[0]
        assert seq.text == s.decode(seq.tokens, skip_special=True)


def test_serve_refuses_a_model_it_cannot_find(tmp_path):
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "rlnb.cli", "serve", "--port", "1", "--model", "q=Qwen/Qwen3-0.6B"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "hf download Qwen/Qwen3-0.6B" in proc.stderr
    bad = subprocess.run([*cmd[:-1], "no-equals-sign"], capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 2 and "NAME=PATH_OR_ID" in bad.stderr
