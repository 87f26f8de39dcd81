"""A decode step's token choice: each row's next token from its logits (greedy, or temperature, top-k and top-p
at the row's uniform, ``rlnb.engine.sampling``) and the token's untempered log-prob, eager (``pick``) or compiled
(``compiled_pick``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from rlnb.engine.models.compiled import Compiler
from rlnb.wire import MIN_TEMPERATURE

if TYPE_CHECKING:
    from rlnb.engine.sampling import Settings


def choose(
    logits: Tensor,
    temperature: float | Tensor,
    top_p: float | Tensor,
    top_k: int,
    u: Tensor,
    greedy: bool,
    nucleus: bool,
) -> Tensor:
    """Next token per row, ``[B, 1]``: greedy, else top-k / top-p (``nucleus``) filtered sampling at the row's uniform
    (``u`` ``[B, 1]``; inverse CDF: the first token whose cumulative probability exceeds u). Columns, not ``[B]``
    vectors: ``searchsorted`` and ``gather`` take them as they are (an unsqueeze and a select a step fewer).
    ``temperature`` and ``top_p`` may be 0-d tensors: a compiled choice takes them as inputs, so that a new value
    does not compile again."""
    if greedy:
        return logits.argmax(-1, keepdim=True)
    if not (isinstance(temperature, float | int) and temperature == 1):  # x / 1 is x: one op less per step
        logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if nucleus:
        probs, order = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True)
        before = probs.cumsum(-1) - probs  # the mass of the more likely tokens: exactly 0 for the most likely
        # keep the smallest prefix whose mass reaches top_p, and always the most likely token: a top_p below
        # float32's smallest (1e-300 is valid) is 0 here, and would drop every token
        drop = (before >= top_p) & (before > 0)
        logits = logits.masked_fill(drop.scatter(-1, order, drop), -math.inf)
    cdf = torch.softmax(logits, dim=-1).cumsum(dim=-1)
    token = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)
    return token.clamp(max=logits.shape[-1] - 1)  # u * total < total, so only rounding could reach V


def choice(
    logits: Tensor,
    u: Tensor,
    temperature: float | Tensor,
    top_p: float | Tensor,
    top_k: int,
    greedy: bool,
    nucleus: bool,
) -> tuple[Tensor, Tensor]:
    """One step's choice: each row's next token (``choose``, ``u`` ``[B, 1]``) and its untempered log-prob, ``[B]``
    each."""
    logits = logits.float()
    token = choose(logits, temperature, top_p, top_k, u, greedy, nucleus)
    return token[:, 0], torch.log_softmax(logits, dim=-1).gather(-1, token)[:, 0]


def pick(logits: Tensor, u: Tensor, temperature: float, top_p: float, top_k: int) -> tuple[Tensor, Tensor]:
    """``choice`` for these settings: greedy below ``MIN_TEMPERATURE``, nucleus filtering when top_p < 1."""
    return choice(logits, u, temperature, top_p, top_k, temperature < MIN_TEMPERATURE, top_p < 1.0)


Pick = Callable[[Tensor, Tensor, float, float, int], tuple[Tensor, Tensor]]
"""``pick`` or its compiled form (``compiled_pick``): ``(logits [B, V], u [B, 1], temperature, top_p, top_k)``."""


GREEDY_VOCAB = 4096
"""On a CPU, the smallest vocabulary whose greedy choice compiles (``compiles``)."""


def compiles(device: torch.device, greedy: bool, vocab: int) -> bool:
    """Whether a compiled sample's token choice compiles: on a CPU only a greedy one of ``GREEDY_VOCAB`` tokens or
    more. There inductor's sampling choice (the softmax, cumsum and log-prob of 16 rows) ran 1.14-2.18x slower than
    eager ``pick`` at vocabularies of 256-151,936, its greedy one 0.58-0.98x at 4,096 and more but 1.43-2.23x at 256
    and 1,024 (``bench/bench_choice.py``). On a GPU every kind compiles (fused kernels, fewer launches; not measured
    against eager there)."""
    return device.type != "cpu" or (greedy and vocab >= GREEDY_VOCAB)


def compiled_pick(
    compiler: Compiler, settings: Settings, dtype: torch.dtype, rows: int, vocab: int, device: torch.device
) -> Pick:
    """``pick`` for one sample's ``settings``, as a compiled ``choice`` where it ``compiles`` (else ``pick`` itself):
    one graph per kind of choice (greedy or not, nucleus or not, top_k) and shape. Temperature and top_p enter as
    tensors, so that a sweep over them compiles once (``torch.compile`` makes a graph per value of a float argument)."""
    greedy, nucleus = settings.temperature < MIN_TEMPERATURE, settings.top_p < 1.0
    if not compiles(device, greedy, vocab):
        return pick
    k = settings.top_k if 0 < settings.top_k < vocab else -1
    step = compiler.wrap(choice, "token choice", dtype, batch=rows, vocab=vocab, greedy=greedy, nucleus=nucleus,
                         top_k=k)  # fmt: skip
    temperature, top_p = (torch.tensor(x, device=device) for x in (settings.temperature, settings.top_p))

    def run(logits: Tensor, u: Tensor, *_: object) -> tuple[Tensor, Tensor]:  # the settings: this sample's, above
        # The prompt's last logits are a strided view, a decode step's are not: one layout, one graph per kind.
        return step(logits.contiguous(), u, temperature, top_p, k, greedy, nucleus)

    return run
