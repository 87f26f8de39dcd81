"""Find LR's copy of a local session is opened with every option that shapes the session's model (review41b #1): a
bfloat16 session's range test ran on a float32 copy, and a session opened with ``trust_remote_code=True`` or
``tokenizer=`` had its copy refused. The session's recorded config names those options too."""

import json

import pytest
import torch

import rlnb
from rlnb import samples
from rlnb.history import History
from rlnb.sweep import lr_find
from rlnb.widgets import RunPanel
from tests.support import hf_models


def text_step(seen):
    """A step of text cross-entropy (the copy needs the session's tokenizer for it) that records the copy's weight
    dtype and its history's config."""

    def step(copy, params, i):
        seen.append((next(copy.backend.trainer.parameters()).dtype, copy.history.config))
        copy.forward_backward([samples.from_text(copy, "the model answers", " 12", eos=True)]).result(timeout=60)
        copy.optim_step(params).result(timeout=60)
        return 1.0

    return step


def byte_step(seen):
    def step(copy, params, i):
        seen.append((next(copy.backend.trainer.parameters()).dtype, copy.history.config))
        copy.forward_backward([samples.cross_entropy(list(b"the digits 0123"))]).result(timeout=60)
        copy.optim_step(params).result(timeout=60)
        return 1.0

    return step


def test_a_bfloat16_builtin_sessions_copy_is_bfloat16_with_its_end_tokens_and_replicas(tmp_path):
    """The built-in model: no transformers needed. A trainer-only session's copy is trainer-only (a sampler copy
    it never had could run out of memory), and its extra end token stays one."""
    session = rlnb.connect("local", dtype="bfloat16", eos_token_id=[7], num_generator_replicas=0, device="cpu",
                           record=False, checkpoint_dir=tmp_path / "ck")  # fmt: skip
    seen = []
    lr_find(rlnb.AdamParams(), session, steps=5, step_fn=byte_step(seen), objective="loss")
    session.close()
    assert [dtype for dtype, _ in seen] == [torch.bfloat16] * 5
    config = seen[0][1]
    assert (config["dtype"], config["eos_token_id"], config["num_generator_replicas"]) == ("bfloat16", [7], 0)
    assert session.history.config["eos_token_id"] == [7] and session.history.config["tokenizer"] is None


@pytest.mark.slow
@pytest.mark.parametrize("lora", [None, {"rank": 4}], ids=["full", "lora"])
def test_a_bfloat16_hugging_face_sessions_copy_is_bfloat16(hf_dirs, tmp_path, lora):
    """The LoRA copy was refused ("resume with dtype='bfloat16'"), the full one ran in float32 and said nothing."""
    session = rlnb.connect("local", model=hf_dirs["llama"], dtype="bfloat16", lora=lora, device="cpu",
                           record=False, checkpoint_dir=tmp_path / "ck")  # fmt: skip
    seen = []
    lr_find(rlnb.AdamParams(), session, steps=5, step_fn=text_step(seen), objective="loss")
    session.close()
    assert [dtype for dtype, _ in seen] == [torch.bfloat16] * 5
    assert seen[0][1]["dtype"] == "bfloat16" and seen[0][1]["lora"] == session.history.config["lora"]


@pytest.mark.slow
@pytest.mark.usefixtures("transformers")  # skipped without it
def test_a_trusted_code_sessions_copy_trusts_it_too(tmp_path, monkeypatch):
    monkeypatch.setenv("RLNB_TEST_MARKER", str(tmp_path / "ran"))
    folder = hf_models.with_own_code(tmp_path / "m")
    session = rlnb.connect("local", model=str(folder), trust_remote_code=True, device="cpu", record=False,
                           checkpoint_dir=tmp_path / "ck")  # fmt: skip
    seen = []
    result = lr_find(rlnb.AdamParams(), session, steps=5, step_fn=text_step(seen), objective="loss")
    session.close()
    assert len(result.values) == 5 and seen[0][1]["trust_remote_code"] is True
    assert session.history.config["trust_remote_code"] is True


@pytest.mark.slow
@pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view
def test_a_tokenizer_given_sessions_copy_has_that_tokenizer_and_the_panels_button_too(tmp_path, transformers):
    """The model folder has no tokenizer: the copy was NoTokenizer, with a text step_fn and with the digits task
    (the RunPanel's Find LR button goes through the same copy). The config records the tokenizer printably: a path
    as given, an object by its name or path."""
    tokenizer = str(hf_models.save("llama", tmp_path / "withtok"))
    folder = str(hf_models.save("llama", tmp_path / "notok", with_tokenizer=False))
    session = rlnb.connect("local", model=folder, tokenizer=tokenizer, device="cpu", record=False,
                           checkpoint_dir=tmp_path / "ck")  # fmt: skip
    seen = []
    lr_find(rlnb.AdamParams(), session, steps=5, step_fn=text_step(seen), objective="loss")
    assert session.history.config["tokenizer"] == seen[0][1]["tokenizer"] == tokenizer
    panel = RunPanel(session, n_steps=5, every=0.05)
    finder = panel.builder.lr_finder
    finder.options = {"steps": 5, "runs_dir": tmp_path / "runs"}  # real RL steps of the digits task, as text
    finder.button.click()
    finder.join(120)
    assert finder.error is None and len(finder.result.values) > 0
    assert History.load(finder.result.run_path).config["tokenizer"] == tokenizer
    panel.close()
    session.close()
    loaded = transformers.AutoTokenizer.from_pretrained(tokenizer)
    with rlnb.connect("local", model=folder, tokenizer=loaded, device="cpu", record=False) as given:
        assert given.history.config["tokenizer"] == tokenizer  # its name_or_path: the folder it came from
        json.dumps(given.history.config)  # printable: the object is not in it


class Shifted:
    """A tokenizer of its own for the byte-level ``rlnb/tiny`` (each letter one id below its byte), told apart from
    the byte codec a remote ``rlnb/...`` session takes when given none."""

    eos_token_id = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [b - 1 for b in text.encode()]

    def decode(self, tokens: list[int], skip_special_tokens: bool = False) -> str:
        return bytes(t + 1 for t in tokens).decode()


@pytest.mark.slow  # the app, in process
def test_a_remote_sessions_copy_has_the_tokenizer_and_replicas_its_connect_was_given(tmp_path):
    """The remote branch opened its copy with base_model, muon_scaling and lora only: a ``tokenizer=`` given to the
    remote connect was dropped, and the copy of an ``rlnb/tiny`` session encoded text as bytes where the session
    did not; its sampler copies went back to the default. The copy encodes as the session does."""
    import httpx

    from tests.support.server import Counter, app_client

    tokenizer = Shifted()
    with app_client(tmp_path / "ckpt") as c:
        counter = Counter(c)
        remote = rlnb.connect("http://testserver", base_model="rlnb/tiny", tokenizer=tokenizer, record=False,
                              num_generator_replicas=2, transport=httpx.MockTransport(counter),
                              max_retries=0)  # fmt: skip
        seen: list[tuple[object, list[int], object]] = []

        def step(copy: rlnb.Session, params: object, i: int) -> float:
            seen.append((copy.tokenizer, copy.encode("ab"), copy.history.config["num_generator_replicas"]))
            return 1.0

        lr_find(rlnb.AdamParams(), remote, steps=5, step_fn=step, runs_dir=tmp_path / "runs",
                transport=httpx.MockTransport(counter), max_retries=0)  # fmt: skip
        remote.close()
    assert remote.encode("ab") == [96, 97]
    assert seen == [(tokenizer, [96, 97], 2)] * 5
