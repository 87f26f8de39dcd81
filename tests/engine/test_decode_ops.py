"""How many torch ops one decode step dispatches (issue 20 (c)): on a small model a step is dispatch-bound, so the
count is the cost a sampler can cut. Counted, not timed: the count is the same on any machine and under any load."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch

from rlnb.engine import sampling
from rlnb.engine.models.decoders import BuiltinDecoder
from rlnb.engine.models.tiny import KVCache, build_model
from rlnb.testing.ops import OpCounter
from rlnb.testing.ops import per_step as added
from rlnb.text.codec import ByteCodec

PER_LAYER = 21
"""aten ops per layer and step: 2 layer norms, 4 linears (t + addmm), q, k, v as one view of the projection unbound,
2 cache writes and 2 slices of the filled slots, SDPA, the heads' re-assembly view, GELU and 2 residual adds."""
PER_STEP = 19
"""The rest of a step: 2 embeddings and their sum, the mask's slice, the next position and slot, the final norm and
head, and the token choice at temperature 1 with its log-prob (10 ops: 12 while its uniform and token were ``[B]``
vectors, an unsqueeze each to meet ``searchsorted`` and ``gather``)."""


def ops(steps: int, settings: dict[str, Any]) -> Counter[str]:
    model = build_model("tiny", 0)
    prompts, n = [[1, 2, 3], [4, 5]], 4
    with torch.no_grad(), OpCounter() as count:
        decoder = BuiltinDecoder(model, KVCache(model.config, 8, 3 + steps, torch.device("cpu"), torch.float32))
        sampling.draw(decoder, prompts, n, sampling.Settings(max_tokens=steps, **settings),
                      torch.rand(steps, 8), ByteCodec(), torch.device("cpu"))  # fmt: skip
    return count.ops


def per_step(settings: dict[str, Any]) -> dict[str, float]:
    """Ops that one more decode step adds (a long and a short sample's difference: the prefill cancels)."""
    return added(ops(9, settings), ops(17, settings), 8)  # 8 more steps: with EOS one more end-of-rows check


@pytest.mark.slow  # dispatch through a Python mode: about a second a count on a loaded machine
def test_an_eager_decode_step_dispatches_no_per_step_mask_or_buffer_work() -> None:
    n_layer = build_model("tiny", 0).config.n_layer
    counts = per_step({})
    assert sum(counts.values()) <= PER_LAYER * n_layer + PER_STEP, counts
    # the mask is built once per sample (``KVCache.fill``), the tokens and log-probs stacked once at the end
    for op in ("aten.where.self", "aten.scalar_tensor.default", "aten.arange.default", "aten.copy_.default"):
        assert op not in counts, (op, counts)


@pytest.mark.slow
def test_eos_checks_cost_two_ops_a_step() -> None:
    plain, eos = per_step({}), per_step({"eos": (300,)})  # an id no row draws: every row runs to max_tokens
    extra = {op: eos.get(op, 0) - plain.get(op, 0) for op in {*plain, *eos}}
    every = 1 / sampling.CHECK_EVERY  # whether every row has ended: one check (and host sync) every CHECK_EVERY steps
    assert {op: k for op, k in extra.items() if k} == {"aten.isin.Tensor_Tensor": 1, "aten.bitwise_or_.Tensor": 1,
                                                        "aten.all.default": every,
                                                        "aten._local_scalar_dense.default": every}  # fmt: skip


def before_decoding(prompts: int) -> Counter[str]:
    """Ops of the batch's left padding and uniforms, ``prompts`` prompts of 1 to 5 tokens, 3 samples each."""
    batch, cpu = [list(range(1, 2 + i % 5)) for i in range(prompts)], torch.device("cpu")
    with OpCounter() as count:
        sampling.left_pad(batch, 3, cpu)
        sampling.uniforms(7, prompts, 3, 10, cpu)
    return count.ops


def test_the_work_before_decoding_is_one_torch_op_per_prompt():
    """A tensor and two copies per prompt (``left_pad``) and a generator, a fill and a block to concatenate per prompt
    (``uniforms``) were torch ops per prompt: now the batch is padded in one tensor, and each prompt's only op is the
    fill of its uniforms from its own generator (its stream, and so a seed's tokens, as before)."""
    assert added(before_decoding(2), before_decoding(10), 8) == {"aten.uniform_.default": 1}


def outside_the_step(decoder: Any, step: Any, steps: int = 3) -> tuple[Counter[str], list[int]]:
    """The ops ``decoder`` dispatches around ``steps`` calls of its step function ``step`` (run uncounted: what a
    compiled graph does is not a dispatch of its own), and the first row's position after each step."""
    from torch.utils._python_dispatch import _disable_current_modes

    def uncounted(*args: Any) -> Any:
        with _disable_current_modes():
            return step(*args)

    decoder.steps = lambda window: uncounted
    tokens, seen = torch.tensor([7, 8, 9]), []
    with torch.no_grad():
        decoder.prefill(
            torch.tensor([[1, 2, 3], [0, 4, 5], [0, 0, 6]]), torch.tensor([[1, 1, 1], [0, 1, 1], [0, 0, 1]])
        )
        with OpCounter() as count:
            for _ in range(steps):
                decoder.step(tokens)
                with _disable_current_modes():
                    seen.append(int(getattr(decoder, "pos", getattr(decoder, "last", None))[0]))
    return count.ops, seen


def test_a_compiled_builtin_step_dispatches_nothing_outside_its_graph() -> None:
    """The next position and slot were 2 adds after each compiled step, outside its graph: the step now advances them
    in place, inside it (the same positions: tokens unchanged, ``test_compiled``)."""
    model = build_model("tiny", 0)
    cache = KVCache(model.config, 3, 64, torch.device("cpu"), torch.float32, compiled=True)
    ops, positions = outside_the_step(BuiltinDecoder(model, cache, lambda w: None), type(model).decode_step)
    assert ops == Counter() and positions == [4, 5, 6]  # row 0's prompt: 3 tokens, so its first new one is at 3


@pytest.mark.slow  # transformers
def test_a_compiled_hf_step_dispatches_nothing_outside_its_graph(hf_dirs: dict[str, str]) -> None:
    """As the built-in step: the next position (an add after each compiled step) is advanced inside the step."""
    from transformers import AutoModelForCausalLM

    from rlnb.engine.models.decoders import HFDecoder, hf_step
    from rlnb.engine.models.hf_window import WindowedCache

    model = AutoModelForCausalLM.from_pretrained(hf_dirs["qwen3"]).eval()
    decoder = HFDecoder(model, (WindowedCache(model.config, 64), 64), lambda w: None)
    ops, positions = outside_the_step(decoder, hf_step)
    assert ops == Counter() and positions == [3, 4, 5]  # the prompt's last at 2: each step's token one on
