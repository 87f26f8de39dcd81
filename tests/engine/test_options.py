"""LocalBackend's options: flat keywords (``rlnb.connect("local", seed=1, ...)``) and the groups they fill
(``ModelOptions``, ``MuonOptions``, ``CheckpointOptions``, ``ComputeOptions``) are the same settings, checked before
a model loads."""

import os

import pytest
import torch

import rlnb
from rlnb import samples
from rlnb.engine.backend import LocalBackend
from rlnb.engine.options import CheckpointOptions, ComputeOptions, ModelOptions, MuonOptions
from rlnb.text.codec import ByteCodec


@pytest.mark.parametrize(
    "options, error, match",
    [
        ({"muon_scaling": "spectral"}, ValueError, "muon_scaling must be None, 'original' or 'match_adam'"),
        ({"lora": "yes"}, ValueError, "lora"),
        ({"seeed": 1}, TypeError, "unexpected keyword argument.*seeed"),
        ({"resume_from_checkpoint_id": "c"}, TypeError, r"checkpoint_id \(a local session resumes .*resume_from=\)$"),
        ({"threads": 0}, ValueError, "threads must be None .* or an integer >= 1 and <= 1024, got 0"),
        ({"threads": 10**6}, ValueError, "threads must be None .* <= 1024, got 1000000"),
        ({"threads": 2**63}, ValueError, "threads must be None .* <= 1024, got 9223372036854775808"),
        ({"compile": "yes"}, ValueError, "compile must be True or False"),
        ({"seed": 2**64}, ValueError, r"seed must be an integer in \[-9223372036854775808, 9223372036854775807\]"),
        ({"seed": "0"}, ValueError, r"seed must be an integer in \[-9223372036854775808, .*got '0'"),
        ({"seed": 1.5}, ValueError, "seed must be an integer .*got 1.5"),
        ({"seed": True}, ValueError, "seed must be an integer .*got True"),
        ({"sampling_seed": 2**64}, ValueError, r"sampling_seed must be None or an integer in \[-9223372036854775808"),
        ({"num_generator_replicas": -1}, ValueError, r"num_generator_replicas must be .*2147483647\], got -1"),
        ({"num_generator_replicas": "1"}, ValueError, r"num_generator_replicas must be .*2147483647\], got '1'"),
        ({"num_generator_replicas": 2**70}, ValueError, r"replicas must be an integer in \[0, 2147483647\], got \d+"),
        ({"load_optimizer": False}, ValueError, "load_optimizer applies only with resume_from .*no resume_from"),
        ({"eos_token_id": "</s>"}, ValueError, r"eos_token_id must be .*in \[0, the vocabulary's size\), got '</s"),
        ({"eos_token_id": 2**70}, ValueError, "eos_token_id must be .*got 1180591620717411303424"),
        ({"eos_token_id": -1}, ValueError, "eos_token_id must be .*got -1"),
        ({"eos_token_id": True}, ValueError, "eos_token_id must be .*got True"),
        ({"eos_token_id": 2.5}, ValueError, "eos_token_id must be .*got 2.5"),
        ({"eos_token_id": []}, ValueError, r"eos_token_id must be .*got \[\]"),
        ({"eos_token_id": [2, "x"]}, ValueError, r"eos_token_id must be .*got \[2, 'x'\]"),
        ({"load_optimizer": "no"}, ValueError, "load_optimizer must be None, True or False, got 'no'"),
        ({"checkpoint_dir": 5}, TypeError, "checkpoint_dir must be a path .*got int: 5"),
        ({"checkpoint_dir": ""}, ValueError, "checkpoint_dir must be a folder path or None"),
        ({"checkpoint_dir": "/proc/rlnb"}, ValueError, "checkpoint_dir '/proc/rlnb' cannot hold checkpoints: No such"),
        ({"resume_from": ""}, ValueError, "resume_from must be a checkpoint's path or None"),
        ({"ns_dtype": "fp32"}, ValueError, r"ns_dtype must be one of \['bfloat16', .* or None .*got 'fp32'"),
        ({"ns_dtype": torch.int64}, ValueError, "ns_dtype must be one of .*got torch.int64"),  # failed the first step
        ({"muon_split": {"*.c_fc.weight": "Muon"}}, ValueError, r"muon_split must be None, \{name pattern: 'muon'"),
        ({"muon_split": ["*.c_fc.weight"]}, ValueError, r"muon_split must be .*got \['\*.c_fc.weight'\]"),
        # every operation failed INTERNAL_ERROR: OverflowError (1e300), ValueError (-1, NaN) or TypeError ('1')
        ({"op_delay": 1e300}, ValueError, r"op_delay must be a finite number of seconds in \[0, 86400\], got 1e\+300"),
        ({"op_delay": -1}, ValueError, r"op_delay must be .* in \[0, 86400\], got -1"),
        ({"op_delay": float("nan")}, ValueError, "op_delay must be .*got nan"),
        ({"op_delay": "1"}, ValueError, "op_delay must be .*got '1'"),
    ],
)
def test_bad_options_are_refused_before_the_model_loads(options, error, match):
    """``model`` names nothing that exists: had it been loaded first, that would be the error."""
    with pytest.raises(error, match=match):
        LocalBackend("muon", "/no/such/model/folder", **options)


def test_groups_and_flat_keywords_are_the_same_settings(tmp_path):
    backend = LocalBackend(
        "muon",
        "tiny",
        model_options=ModelOptions(seed=3, device="cpu", num_generator_replicas=0),
        muon_options=MuonOptions(muon_scaling="match_adam", ns_dtype="float32"),
        checkpoint_options=CheckpointOptions(checkpoint_dir=tmp_path / "ckpt"),
        compute_options=ComputeOptions(threads=2),
        seed=4,  # a field by name wins over its group's
        threads=1,
    )
    try:
        config = backend.config()
        assert config["seed"] == 4 and config["device"] == "cpu"
        assert config["muon_scaling"] == "match_adam" and config["ns_dtype"] == "float32"
        assert backend.engine.num_generator_replicas == 0
        assert (config["threads"], config["thread_policy"], config["compile"]) == (1, "fixed", False)
        twin = LocalBackend("muon", "tiny", seed=4, device="cpu", muon_scaling="match_adam", ns_dtype="float32")
        same = all(p.equal(q) for p, q in zip(backend.trainer.parameters(), twin.trainer.parameters(), strict=True))
        assert same  # the same seed by either road builds the same weights
        twin.close()
        with rlnb.Session(backend, record=False) as s:
            ckpt = s.save_training_checkpoint().result(timeout=60)
        assert backend.checkpoint_path(ckpt.checkpoint.id).parent == tmp_path / "ckpt"
    finally:
        backend.close()


def test_eos_token_id_is_a_token_of_the_vocabulary_checked_once_the_model_is_loaded():
    with pytest.raises(ValueError, match=r"eos_token_id must be .*in \[0, 255\] \(the vocabulary\), got 300"):
        LocalBackend("adam", "tiny", device="cpu", eos_token_id=300)
    with pytest.raises(ValueError, match=r"in \[0, 255\] \(the vocabulary\), got \[10, 256\]"):
        LocalBackend("adam", "tiny", device="cpu", eos_token_id=[10, 256])


def test_an_eos_list_ends_samples_and_leaves_the_reward_text_as_one_id_does():
    """Generation configs write eos_token_id as a list: sampling and the text a reward reads treat [t] as t."""

    def greedy(eos):
        with rlnb.connect("local", model="tiny", device="cpu", threads=1, record=False, eos_token_id=eos) as s:
            seq = s.sample("n=", max_tokens=12, temperature=0.0).result().results[0].sequences[0]
            return seq.tokens, seq.stop_reason, s.decode(seq.tokens, skip_special=True)

    free, _, _ = greedy(None)
    stop = free[3]
    cut = free[: free.index(stop) + 1]
    other = next(t for t in range(256) if t not in free)
    for eos in (stop, [stop], (other, stop)):
        tokens, reason, text = greedy(eos)
        assert tokens == cut and reason == "STOP_REASON_STOP", eos
        assert text == ByteCodec().decode(cut[:-1]), eos


def test_user_paths_expand_home_and_a_checkpoint_dir_under_a_file_is_refused(tmp_path, monkeypatch):
    """``~`` is the home folder in checkpoint_dir, resume_from and runs_dir, as in model=: no ``./~`` folder."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    options = {"model": "tiny", "device": "cpu", "threads": 1}
    with rlnb.connect("local", checkpoint_dir="~/ck", runs_dir="~/runs", run_id="r", **options) as s:
        s.forward_backward([samples.cross_entropy(list(b"n=12"))])
        s.optim_step()
        result = s.save_training_checkpoint().result()
        path = s.backend.checkpoint_path(result.checkpoint.id)
    assert path.parent == home / "ck" and (home / "runs" / "r").is_dir() and not (tmp_path / "~").exists()
    assert len(rlnb.History.load("~/runs/r")) == 3 and list(rlnb.runs("~/runs")["run_id"]) == ["r"]
    with rlnb.connect("local", resume_from=f"~/ck/{path.name}", record=False, **options) as r:
        assert r.step == 1
    with pytest.raises(
        TypeError,
        match=r"resume_from must be a checkpoint's path, not the result of a save "
        r"\(TrainingCheckpointResult\): pass session.backend.checkpoint_path",
    ):
        rlnb.connect("local", resume_from=result, **options)
    file = tmp_path / "file"
    file.write_text("not a folder")
    for folder, where in ((file, "is a file"), (file / "sub", f"is under '{file}', a file")):
        with pytest.raises(ValueError, match=f"checkpoint_dir '{folder}' {where}: checkpoints go into a folder"):
            rlnb.connect("local", checkpoint_dir=folder, **options)


def test_a_relative_checkpoint_dir_stays_where_it_was_given(tmp_path, monkeypatch):
    """A relative ``checkpoint_dir`` was kept relative: after ``os.chdir`` (``%cd`` in a notebook) checkpoints went to
    a new folder under the new working folder, and ``checkpoint_path`` named a path that moved with the next chdir."""
    from rlnb.engine.options import CheckpointOptions

    monkeypatch.chdir(tmp_path)
    assert CheckpointOptions(checkpoint_dir="ck").checkpoint_dir == tmp_path / "ck"


def test_a_checkpoint_path_too_long_or_with_a_nul_is_refused_naming_the_option(tmp_path):
    """A name past the file system's 255 bytes was a bare ``OSError: [Errno 36] File name too long`` (from ``exists``,
    before the options' own checks), a NUL ``ValueError: embedded null byte``: neither named the option."""
    long, nul = tmp_path / ("a" * 300), f"{tmp_path}/x\0y"
    with pytest.raises(ValueError, match=r"^checkpoint_dir '.*a{100}' cannot hold checkpoints: File name too long"):
        CheckpointOptions(checkpoint_dir=long)
    with pytest.raises(ValueError, match=r"^resume_from '.*a{100}' cannot be read: File name too long"):
        CheckpointOptions(resume_from=long)
    for option in ("checkpoint_dir", "resume_from"):
        with pytest.raises(ValueError, match=rf"^{option} holds a NUL character, which no path can: '.*x\\x00y'"):
            CheckpointOptions(**{option: nul})


def test_a_resume_from_that_is_a_pipe_is_refused_not_read_for_ever(tmp_path):
    """``resume_from`` a named pipe (or ``/dev/stdin`` in a notebook): ``torch.load`` waited on it for ever."""
    fifo = tmp_path / "ckpt.pt"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        with pytest.raises(ValueError, match=r"is neither a file nor a folder \(a pipe, a device\): not a checkpoint"):
            CheckpointOptions(resume_from=path)


@pytest.mark.parametrize(("options", "match"), [
    ({"dtype": "float8"}, r"dtype must be one of auto, float32, bfloat16, float16, got 'float8'"),
    ({"device": "tpu"}, r"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'tpu'"),
])  # fmt: skip
def test_a_dtype_or_device_is_checked_when_its_group_is_built(options, match):
    """docs/concepts.md: each group checks its fields when built (these were refused only once connect ran)."""
    from rlnb.batched.options import EngineOptions

    with pytest.raises(ValueError, match=match):
        ModelOptions(**options)
    if "device" in options:
        with pytest.raises(ValueError, match=match):
            EngineOptions(**options)


@pytest.mark.parametrize("device", ["meta", "mps", "xpu", "hpu", "privateuseone", torch.device("meta"), "meta:0"])
def test_a_device_torch_parses_but_the_engine_does_not_run_on_is_refused_up_front(device):
    """torch parses many device names: ``"meta"`` opened a session whose forward-backward and sample failed
    INTERNAL_ERROR (and whose optim-step completed); ``"mps"``, ``"xpu"`` and ``"hpu"`` raised torch's own errors
    (a RuntimeError, a bare AssertionError, a ModuleNotFoundError) once the model was being built."""
    from rlnb.batched.options import EngineOptions

    said = f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}"
    for build in (ModelOptions, EngineOptions):
        with pytest.raises(ValueError) as refused:
            build(device=device)
        assert str(refused.value) == said
    with pytest.raises(ValueError, match="device must be"):
        rlnb.connect("local", model="tiny", device=device, record=False)


@pytest.mark.parametrize("device", ["auto", "cpu", "cpu:0", "cuda", "cuda:1", torch.device("cpu")])
def test_the_cpu_and_cuda_are_taken_when_the_options_are_built(device):
    assert ModelOptions(device=device).device == device  # whether CUDA is there is checked when the session starts


MUON_ONLY_SAID = r"muon_scaling, ns_dtype and muon_split are for Muon sessions \(optimizer='muon'\) only; "
"""What an Adam session (or ensemble) given a Muon-only option is told."""


def test_muon_options_on_an_adam_session_are_refused_naming_them():
    """``optimizer="adam"`` with ``muon_split=...`` or ``muon_scaling="match_adam"`` took them in silence (over the
    API, ``muon_scaling`` with adam is refused)."""
    said = r"^muon_scaling='match_adam', muon_split=\{'\*': 'adam'\}: " + MUON_ONLY_SAID
    with pytest.raises(ValueError, match=said + r"this session's optimizer is adam$"):
        LocalBackend("adam", device="cpu", threads=1, muon_scaling="match_adam", muon_split={"*": "adam"})
    with pytest.raises(ValueError, match=r"^muon_split=\{'\*': 'adam'\}: " + MUON_ONLY_SAID):
        rlnb.connect("local", optimizer="adam", device="cpu", record=False, muon_split={"*": "adam"})
    for given in ({"muon_scaling": "original"}, {"muon_options": MuonOptions(muon_scaling="original")}):
        # "original" is the default: it was taken in silence, where the docs say any Muon setting given is refused
        with pytest.raises(ValueError, match=r"^muon_scaling='original': " + MUON_ONLY_SAID):
            rlnb.connect("local", optimizer="adam", device="cpu", record=False, **given)


@pytest.mark.parametrize("ns_dtype", ["float32", torch.bfloat16])
def test_ns_dtype_on_an_adam_session_is_refused_as_the_other_muon_options(ns_dtype):
    """``ns_dtype`` (Muon's Newton-Schulz dtype) on an Adam session was taken and ignored in silence, while
    ``muon_scaling`` / ``muon_split`` were refused: the same refusal, from the one ``MUON_ONLY`` catalogue."""
    with pytest.raises(ValueError, match=rf"^ns_dtype={ns_dtype!r}: " + MUON_ONLY_SAID + "this session's optimizer"):
        rlnb.connect("local", optimizer="adam", device="cpu", record=False, ns_dtype=ns_dtype)
    with pytest.raises(ValueError, match=rf"^ns_dtype={ns_dtype!r}: " + MUON_ONLY_SAID):
        LocalBackend("adam", device="cpu", threads=1, muon_options=MuonOptions(ns_dtype=ns_dtype))
    with rlnb.connect("local", optimizer="muon", device="cpu", record=False, ns_dtype=ns_dtype) as s:
        assert s.backend.optim.ns_dtype == (ns_dtype if isinstance(ns_dtype, torch.dtype) else torch.float32)


def test_the_model_loaders_refuse_a_dtype_with_the_options_one_message():
    """``build_adapter`` and ``hf.load`` each wrote the check and its message again (three copies of one list)."""
    from rlnb.engine.models import hf
    from rlnb.engine.models.factory import build_adapter

    said = "dtype must be one of auto, float32, bfloat16, float16, got 'float8'"
    for load in (
        lambda: build_adapter("tiny", dtype="float8", device=torch.device("cpu")),
        lambda: hf.load("x", "float8"),
    ):
        with pytest.raises(ValueError, match=f"^{said}$"):
            load()


def test_float16_weights_take_a_step_and_sample_on_the_cpu():
    """float16 is one of the weights' dtypes (``rlnb serve --dtype float16`` takes it): the weights are float16, an
    AdamW step with an eps float16 holds moves them, and sampling runs on them."""
    with rlnb.connect("local", model="tiny", device="cpu", record=False, dtype="float16") as s:
        weights = s.backend.engine.trainer
        before = [p.detach().clone() for p in weights.parameters()]
        assert {p.dtype for p in before} == {torch.float16}
        s.forward_backward([samples.cross_entropy(list(b"float sixteen"))]).result()
        s.optim_step(rlnb.AdamParams(learning_rate=1e-3, eps=1e-6)).result()
        assert any(not torch.equal(a, b) for a, b in zip(before, weights.parameters(), strict=True))
        assert all(torch.isfinite(p).all() for p in weights.parameters())
        out = s.sample("ab", num_samples=2, max_tokens=4, seed=1).result()
        assert [len(q.tokens) for q in out.results[0].sequences] == [4, 4]
