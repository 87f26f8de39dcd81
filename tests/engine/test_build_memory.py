"""Running out of memory while ``connect("local")`` builds the model (review41b #2): torch's raw allocator error
("[enforce fail at alloc_cpu.cpp:127] ...") from the sampler's copy, or a ``ModelRefused`` that read as "the model is
wrong" from the load. One error says memory ran out, what the session keeps and what to change. Deterministic: the
allocation is made to fail, no memory limit is set."""

import pytest
import torch

import rlnb
from rlnb.engine import assembly, model_setup
from rlnb.engine.models.adapter import BuiltinAdapter
from rlnb.engine.oom import ModelOutOfMemory, out_of_memory, weights_of
from rlnb.engine.optim.trainer import TrainerOptimizer
from tests.support import hf_models
from tests.support.no_room import ALLOCATOR, no_room


def weight_bytes(module):
    return sum(p.numel() * p.element_size() for p in module.parameters())


def test_the_samplers_copy_that_does_not_fit_names_the_weights_the_copies_and_the_advice(monkeypatch):
    with rlnb.connect("local", device="cpu", record=False) as fits:
        expected = weight_bytes(fits.backend.trainer)
    monkeypatch.setattr(model_setup, "sampler_copy", no_room)
    with pytest.raises(ModelOutOfMemory) as caught:
        rlnb.connect("local", device="cpu", record=False)
    words = str(caught.value)
    assert words.startswith("out of memory building the session's model rlnb/tiny on cpu")
    assert f"its weights take {expected / 2**30:.3g} GiB (float32)" in words
    assert f"keeps 2 copies of them ({2 * expected / 2**30:.3g} GiB)" in words
    for advice in ("lora=True", "num_generator_replicas=0", "dtype='bfloat16'"):
        assert advice in words
    assert "DefaultCPUAllocator" in words  # torch's own words stay, at the end
    assert isinstance(caught.value, MemoryError) and out_of_memory(caught.value)  # rlnb serve: RESOURCE_AT_CAPACITY


def test_advice_already_taken_is_not_given_again(monkeypatch):
    """A trainer-only bfloat16 session keeps one copy: only what it has not tried is advised."""

    def fails(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")

    monkeypatch.setattr(assembly, "CheckpointStore", fails)  # the last thing the build makes
    with pytest.raises(ModelOutOfMemory) as caught:
        rlnb.connect("local", device="cpu", record=False, num_generator_replicas=0, dtype="bfloat16")
    words = str(caught.value)
    assert "keeps 1 copy of them" in words and "GiB (bfloat16)" in words
    assert "lora=True" in words and "dtype='bfloat16'" not in words and "num_generator_replicas=0" not in words
    assert words.endswith("(OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB)")


def test_other_failures_of_the_build_are_not_called_out_of_memory(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(model_setup, "sampler_copy", broken)
    with pytest.raises(RuntimeError, match="^a bug$"):
        rlnb.connect("local", device="cpu", record=False)
    assert not out_of_memory(RuntimeError("a bug")) and out_of_memory(OSError(12, "Cannot allocate memory"))


def test_an_error_raised_from_none_over_running_out_is_not_out_of_memory():
    """review41h L1: ``raise ... from None`` in a ``MemoryError``'s handler says the memory is not the cause; the
    context was followed all the same, and a refusal raised there read as out of memory (RESOURCE_EXHAUSTED)."""
    for suppressed in (True, False):
        try:
            try:
                raise MemoryError
            except MemoryError as exc:
                refusal = ValueError("bad loss input")
                if suppressed:
                    raise refusal from None
                raise refusal from exc
        except ValueError as exc:
            assert out_of_memory(exc) is not suppressed
    try:
        try:
            raise MemoryError
        except MemoryError:
            raise KeyError("k")  # noqa: B904 - raised while handling it: its context, not suppressed
    except KeyError as exc:
        assert out_of_memory(exc)


def test_the_weights_on_disk_are_the_files_transformers_loads(tmp_path):
    """review41h L2: every ``*.safetensors``, ``*.bin`` and ``*.pt`` counted, an HF Trainer checkpoint's optimizer
    and training arguments among them, said its weights took 4x what they do. transformers loads the safetensors
    weights where there are any, else ``pytorch_model*.bin``."""
    files = {"model.safetensors": 1000, "pytorch_model.bin": 1000, "optimizer.pt": 2000, "training_args.bin": 10,
             "rng_state.pth": 30, "adapter_model.safetensors": 40}  # fmt: skip
    sharded = {"pytorch_model-00001-of-00002.bin": 300, "pytorch_model-00002-of-00002.bin": 200,
               "training_args.bin": 10, "optimizer.pt": 2000}  # fmt: skip
    for name, folder, expected in [
        ("trainer", files, 1000),
        ("sharded", sharded, 500),
        ("none", {"optimizer.pt": 9}, None),
    ]:
        where = tmp_path / name
        where.mkdir()
        for file, size in folder.items():
            (where / file).write_bytes(b"\0" * size)
        assert weights_of(str(where), None) == (None if expected is None else (expected, "on disk")), name


@pytest.mark.slow
@pytest.mark.usefixtures("transformers")  # skipped without it
def test_a_hugging_face_load_that_runs_out_is_no_refusal_of_the_model(tmp_path, monkeypatch):
    """The load's MemoryError read "ModelRefused: model '...': the weights ... cannot be loaded (MemoryError)"."""
    import transformers

    folder = hf_models.save("llama", tmp_path / "m")
    on_disk = sum(f.stat().st_size for f in folder.glob("*.safetensors"))

    def fails(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fails)
    with pytest.raises(ModelOutOfMemory) as caught:
        hf_models.local(str(folder))
    words = str(caught.value)
    assert f"its weights take {on_disk / 2**30:.3g} GiB (on disk)" in words
    assert words.endswith("(MemoryError)") and "cannot be loaded" not in words


def _saved(tmp_path, kind: str) -> str:
    with rlnb.connect("local", device="cpu", record=False, checkpoint_dir=tmp_path) as s:
        save = s.save_training_checkpoint if kind == "training" else s.save_inference_checkpoint
        return str(s.backend.checkpoint_path(save().result(timeout=60).checkpoint.id))


def _no_room_in(monkeypatch, reader: str) -> None:
    """Make one of resume's three readers run out: the training file's ``torch.load``, an inference checkpoint's
    merged weights, the optimizer state's copy into the new optimizer."""
    if reader == "torch.load":
        monkeypatch.setattr(torch, "load", no_room)
    elif reader == "merged weights":
        monkeypatch.setattr(BuiltinAdapter, "load_merged", no_room)
    else:
        monkeypatch.setattr(TrainerOptimizer, "load_state_dict", no_room)


RESUME_READERS = [("training", "torch.load"), ("inference", "merged weights"), ("training", "optimizer state")]


@pytest.mark.parametrize(("kind", "reader"), RESUME_READERS)
def test_a_resume_that_runs_out_of_memory_is_out_of_memory_not_a_damaged_checkpoint(tmp_path, monkeypatch, kind,
                                                                                     reader):  # fmt: skip
    """review41h M1: each reader caught the allocator's error as the checkpoint's fault ("damaged or cut short",
    "cannot be loaded", "does not fit"), so ``rlnb serve`` ended the session SESSION_FAILED. The error names the
    checkpoint being read (it said only "building the session's model")."""
    path = _saved(tmp_path, kind)
    _no_room_in(monkeypatch, reader)
    with pytest.raises(ModelOutOfMemory) as caught:
        rlnb.connect("local", device="cpu", record=False, resume_from=path)
    words = str(caught.value)
    assert words.startswith(f"out of memory building the session's model rlnb/tiny on cpu from the checkpoint "
                            f"{path!r} (resume_from). To fit: ")  # fmt: skip
    assert words.endswith(f"(RuntimeError: {ALLOCATOR})")
    for blame in ("damaged", "cannot be loaded", "does not fit", "not a usable"):
        assert blame not in words
