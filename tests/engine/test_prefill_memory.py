"""The sampler's memory check counts what a Hugging Face prefill holds at its peak: every tensor alive at once,
op by op (``Live``), is within the count, and the count is that plus the allocator's slack (``HEAP_SLACK``), not
more. A compiled sample of one row a prompt prefills into its static cache through a mask over the slots its
first step attends to, and one of more rows without one (mend40b)."""

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import rlnb
from rlnb.engine.models.factory import build_adapter

CPU = torch.device("cpu")
pytestmark = pytest.mark.slow  # transformers


class Live(TorchDispatchMode):
    """The most bytes that the storages of tensors created under it held at once, after each op."""

    def __init__(self) -> None:
        super().__init__()
        self.now = self.peak = 0
        self.seen: dict[int, weakref.finalize] = {}

    def _freed(self, key: int, size: int) -> None:
        self.now -= size
        self.seen.pop(key, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):  # a view of a tensor from before (a weight's transpose) is none of them
            key = t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) else 0
            if key and key not in self.seen and key not in given:
                storage = t.untyped_storage()
                self.seen[key] = weakref.finalize(storage, self._freed, key, storage.nbytes())
                self.now += storage.nbytes()
        self.peak = max(self.peak, self.now)
        return out


def test_live_counts_the_tensors_alive_at_once():
    a = torch.randn(100, 100)
    with Live() as live:
        b = a @ a
        c = b * 2
        del b
        d = (c + 1)[:10]  # a view keeps its storage
        e = torch.ones(100, 100)
        a.t()  # a view of a tensor from before
    assert (live.peak, live.now) == (3 * 40_000, 3 * 40_000)
    del c, d, e
    assert live.now == 0


def held(adapter, prompts: list[list[int]], n: int, static: bool = False) -> int:
    """The peak bytes of the tensors alive at once while ``adapter``'s decoder prefills ``prompts`` (left-padded),
    their cache sized for one more token; ``static``: the compiled sample's static cache (nothing compiled)."""
    from rlnb.engine import sampling
    from rlnb.engine.models.compiled import Compiler

    rows, length = len(prompts) * n, max(map(len, prompts)) + 1
    decoder = adapter.decoder(adapter.module, rows, length, Compiler(CPU) if static else None)
    ids, mask = sampling.left_pad(prompts, 1, CPU)
    with torch.no_grad(), Live() as live:
        decoder.prefill(ids, mask, n)
    return live.peak


def counted(adapter, prompts: list[list[int]], n: int, static: bool = False) -> tuple[int, int]:
    """What the sample's check counts (KV cache and prefill), and its slack: the allocator's (``HEAP_SLACK``) and,
    for more than one sample a prompt, the samples' cache (allocated once the forward has freed its activations,
    counted beside them)."""
    from types import SimpleNamespace

    from rlnb.engine import handlers
    from rlnb.engine.models.hf_adapter import HEAP_SLACK

    length = max(map(len, prompts)) + 1
    engine = SimpleNamespace(compiler=object() if static else None, adapter=adapter)
    p, tokens, per_token = handlers._prefill(engine, prompts, n, length)  # type: ignore[arg-type]
    cache = len(prompts) * n * length * adapter.kv_bytes_per_token()
    slack = p * tokens * HEAP_SLACK * adapter.module.config.get_text_config().hidden_size * 4
    return cache + p * tokens * per_token, slack + (cache if n > 1 else 0)


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gpt2"])
@pytest.mark.parametrize(
    "prompts,n", [([[5] * 200], 1), ([[5] * 200, [6] * 200], 3), ([[5] * 200, [6] * 90], 1)], ids=["one", "n3", "pad"]
)
def test_the_count_covers_what_a_prefill_holds_at_its_peak(hf_dirs, arch, prompts, n):
    """Before mend40b GPT-2's count was below its live peak (its GELU, written out, holds 4 MLP widths, not 3)."""
    adapter = build_adapter(hf_dirs[arch], device=CPU)
    peak = held(adapter, prompts, n)
    total, slack = counted(adapter, prompts, n)
    assert 0.97 * peak <= total - slack <= 1.25 * peak  # the count less its slack: the live peak's
    assert peak <= total <= 1.25 * (peak + slack)  # never below the live peak; that and the slack, not more


def test_a_compiled_sample_of_one_row_a_prompt_counts_its_static_caches_mask(hf_dirs):
    """Prefilled straight into the static cache (one row a prompt), equal prompts get a ``[P, 1, T, window]`` mask:
    its live peak is past the unmasked count. Prefilled through a cache of their own (more rows), they get none."""
    adapter = build_adapter(hf_dirs["llama"], device=CPU)
    prompts = [[5] * 200, [6] * 200]
    total, slack = counted(adapter, prompts, 1)
    assert held(adapter, prompts, 1, static=True) > total - slack  # past the eager sample's (unmasked) count
    assert held(adapter, prompts, 1, static=True) <= counted(adapter, prompts, 1, static=True)[0]
    assert held(adapter, prompts, 3, static=True) <= counted(adapter, prompts, 3, static=True)[0]
    assert counted(adapter, prompts, 3, static=True) == counted(adapter, prompts, 3)  # no mask counted


def test_a_compiled_session_counts_a_mask_only_for_one_row_a_prompt(hf_dirs, monkeypatch):
    """The refusal names the bytes a prompt token counted: with one sample a prompt, the unmasked count plus 5
    bytes a key of the first step's window; with three, the unmasked count plus the prompt's own KV cache."""
    from rlnb.engine import memory

    monkeypatch.setattr(memory, "host_available", lambda: 1)
    prompts = [[5] * 100, [6] * 100]
    adapter = build_adapter(hf_dirs["llama"], device=CPU)
    unmasked, own = adapter.prefill_bytes_per_token(100, False, False), adapter.kv_bytes_per_token()
    messages = {}
    with rlnb.connect("local", model=hf_dirs["llama"], device="cpu", record=False, compile=True) as s:
        for n in (1, 3):
            with pytest.raises(rlnb.OperationFailed) as failed:
                s.sample(prompts, num_samples=n, max_tokens=150).result(60)
            assert failed.value.code == "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED"
            messages[n] = str(failed.value)
    # the cache: 100 + 150 tokens, bucketed to 256 slots; its first step's window: 128 of them (compiled.window)
    assert f"2 prompts x 100 tokens (the longest prompt) x {unmasked + 5 * 128} bytes" in messages[1]
    assert f"2 prompts x 100 tokens (the longest prompt) x {unmasked + own} bytes" in messages[3]
