"""``rlnb serve`` with local Hugging Face folders: what it hands out names the served model, never a folder of the
server's, and a folder that ships its own code is served on ``--trust-remote-code`` only (tiny models built at test
time, in-process; the folder's code runs in a subprocess)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlnb.server.app import create_app
from tests.support import hf_models
from tests.support.server import app_client, running, submit, wait

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transformers", "peft")]  # Hugging Face and peft
ROOT = Path(__file__).resolve().parents[2]


def _checkpoint(c, sid: str, kind: str) -> str:
    return wait(c, sid, kind, submit(c, sid, kind)["id"])["output"]["checkpoint"]["id"]


def _session(c, model: str, **body) -> dict:
    rid = c.post("/model-resources", json={"base_model": model, "lora_enabled": True}).json()["id"]
    return running(c, c.post("/training-sessions", json={"model_resources_id": rid, **body}).json()["id"])


def test_what_serve_hands_out_names_the_served_model_not_its_folder(tmp_path):
    """An ADAPTER download's adapter_config.json and model card held the server's folder; a LoRA resume on another
    served model was refused as "checkpoint is of model '/tmp/.../f', this session's model is '/tmp/.../other'"."""
    folder = hf_models.save("llama", tmp_path / "my models" / "f")
    shutil.copytree(folder, tmp_path / "changed")
    config = json.loads((tmp_path / "changed" / "config.json").read_text())
    (tmp_path / "changed" / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 0.5}))
    other = hf_models.save("llama", tmp_path / "other", seed=5)
    models = {"my/a": str(folder), "my/changed": str(tmp_path / "changed"), "my/other": str(other)}
    with app_client(tmp_path / "ck", models=models) as c:
        sid = _session(c, "my/a", lora_config={"rank": 4})["id"]
        infer, train = _checkpoint(c, sid, "inference-checkpoint"), _checkpoint(c, sid, "training-checkpoint")
        files = c.get(f"/checkpoints/{infer}/download", params={"variant": "CHECKPOINT_VARIANT_ADAPTER"}).json()
        got = {f["filename"]: c.get(f["url"]).content.decode("utf-8", "replace") for f in files["data"]}
        assert json.loads(got["adapter_config.json"])["base_model_name_or_path"] == "my/a"
        assert "base_model: my/a" in got["README.md"]
        assert not any(str(tmp_path) in text for text in got.values())
        other_weights = _session(c, "my/other", resume_from_checkpoint_id=train)["error"]["message"]
        assert "checkpoint is of model 'my/a', this session's model is 'my/other'" in other_weights
        changed = _session(c, "my/changed", resume_from_checkpoint_id=train)["error"]["message"]
        assert "another config than this session's model 'my/changed' has (rms_norm_eps: 1e-06 at save" in changed
        assert str(tmp_path) not in other_weights + changed


def test_a_folder_with_its_own_code_is_served_on_trust_remote_code_only(tmp_path, capsys, monkeypatch):
    """``rlnb serve --model c=<folder with auto_map>`` advised ``rlnb.connect('local', ..., trust_remote_code=True)``,
    which no server takes; ``--trust-remote-code`` (``ServerSettings.trust_remote_code``) serves it."""
    from rlnb.cli import main

    folder = hf_models.with_own_code(tmp_path / "custom")
    marker = tmp_path / "ran"
    monkeypatch.setenv("RLNB_TEST_MARKER", str(marker))
    capsys.readouterr()  # the folder's save said its progress
    assert main(["serve", "--device", "cpu", "--port", "0", "--model", f"c={folder}"]) == 2
    said = capsys.readouterr().err
    assert said.startswith(f"rlnb serve: --model c: model {str(folder)!r} ships its own Python code")
    assert "start rlnb serve with --trust-remote-code" in said and "rlnb.connect" not in said
    with pytest.raises(ValueError, match=r"^models\['c'\]: .*create_app\(\.\.\., trust_remote_code=True\)"):
        create_app(models={"c": str(folder)})
    assert not marker.exists()

    script = f"""
import sys
from rlnb.cli import main
import rlnb.server.app as app_module
from tests.support.server import app_client, running
apps = []
app_module.run = lambda app, sock, **_: apps.append(app) or sock.close()
assert main(["serve", "--device", "cpu", "--port", "0", "--trust-remote-code", "--model", "c={folder}"]) == 0
assert apps[0].state.registry.settings.trust_remote_code
with app_client(sys.argv[1], models={{"c": {str(folder)!r}}}, trust_remote_code=True) as c:
    rid = c.post("/model-resources", json={{"base_model": "c"}}).json()["id"]
    s = running(c, c.post("/training-sessions", json={{"model_resources_id": rid}}).json()["id"])
    print(s["status"], s.get("error"))
"""
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules")}
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "ck")], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300, stdin=subprocess.DEVNULL)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["TRAINING_SESSION_STATUS_RUNNING", "None"] and marker.exists()
