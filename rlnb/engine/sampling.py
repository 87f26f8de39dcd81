"""Sampling for the in-process backend: every prompt x sample decoded together, one forward per token.

The prompts are left-padded into one batch, each prompt prefilled once, its keys and values repeated for its ``n``
samples (``len(prompts) * n`` rows), then advanced one token per step through the model's cache (``Decoder``).
Temperature, top-k and top-p run on the model's device; chosen tokens and their log-probs stay there
until the end. Randomness is drawn up front: each prompt's generator (seeded from the request's seed and
the prompt's index) fills a ``[max_tokens, n]`` block of uniforms, and each step picks every row's token
by inverting its filtered CDF at that row's uniform — one batched operation per token, and a prompt's
completions do not depend on which other prompts share the batch, only on the seed and its index in the
request (the API's "same seed + same prompt + same weights → same tokens", for a prompt at the same place).
The host looks at the batch only for what needs it:
stop strings (each new token goes to a ``StopMatcher``) and, without them, whether every row has ended
— checked every ``CHECK_EVERY`` tokens rather than at each one, and only with EOS tokens (no row ends without).
The token choice itself is ``rlnb.engine.choice``. ``generate`` draws the uniforms from one seed; ``draw`` takes
them ready-made and returns tensors (batched trials lay several members' blocks side by side, each from its
member's seed, and decode all members' rows at once).

Log-probs are the untempered model's (``log_softmax`` of the raw logits), as the API defines them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from rlnb import wire
from rlnb.engine.choice import Pick, pick
from rlnb.engine.memory import refuse_past_free
from rlnb.engine.models.decoders import Decoder
from rlnb.engine.stops import StopMatcher
from rlnb.text.codec import Codec

CHECK_EVERY = 8
"""Without stop strings, how many tokens pass between checks that every row has ended (a host sync)."""
DIVERGED = "the sampled log-probs are not finite (NaN or Inf): the weights have diverged"
"""Why a sample fails ``NON_FINITE_LOSS`` (JSON has no NaN, and nothing can be trained on such samples)."""


class Diverged(ValueError):
    """``generate`` drew tokens whose log-probs are not finite."""


STOP, LENGTH = wire.STOP_REASON_STOP, wire.STOP_REASON_LENGTH


@dataclass(frozen=True)
class Settings:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: tuple[str, ...] = ()
    eos: tuple[int, ...] = ()


def check_cache(rows: int, length: int, per_token: int, prefill: tuple[int, int, int], device: torch.device) -> None:
    """``RESOURCE_EXHAUSTED`` before anything is allocated when the KV cache of ``rows`` x ``length`` tokens and the
    prefill's activations (``prefill``: prompts, the longest's tokens, bytes a token) would not fit the memory free now
    (``free_memory``, the bound): the engine has no token budget (``rlnb serve`` has), and a cache past it would fail
    only once allocated or filled — or, where Linux overcommits memory, get the process killed. The prefill runs each
    prompt once, whatever ``num_samples``: its share is the largest for one sample (5x the cache on ``tiny``)."""
    prompts, tokens, per_prompt_token = prefill
    how = (
        f"{rows} rows (prompts x num_samples) x {length} tokens (longest prompt + max_tokens) x {per_token} bytes, "
        f"and its prefill: {prompts} prompts x {tokens} tokens (the longest prompt) x {per_prompt_token} bytes"
    )
    advice = "sample fewer prompts, num_samples or max_tokens at once"
    need = rows * length * per_token + prompts * tokens * per_prompt_token
    refuse_past_free(need, device, "this sample's KV cache and prefill", how, advice)


def left_pad(prompts: Sequence[Sequence[int]], n: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Token ids and attention mask ``[len(prompts) * n, longest]``: row ``i * n + j`` is sample j of prompt i.
    Padded as lists, then one tensor for the batch: a tensor and two copies per prompt were torch ops per prompt."""
    longest = max(map(len, prompts))
    ids = [[0] * (longest - len(p)) + list(p) for p in prompts]
    mask = [[0] * (longest - len(p)) + [1] * len(p) for p in prompts]
    both = torch.tensor([ids, mask], dtype=torch.long).to(device)  # [2, prompts, longest]
    both = both[:, :, None].expand(2, len(prompts), n, longest).contiguous().view(2, len(prompts) * n, longest)
    return both[0], both[1]


_HIGH = 0x9E3779B97F4A7C15
"""An odd multiplier (2**64 / the golden ratio): ``high * _HIGH`` is a different 32-bit tail for each high half."""


def uniforms(seed: int, prompts: int, n: int, steps: int, device: torch.device) -> Tensor:
    """``[steps, prompts * n]`` uniforms in [0, 1). Prompt i's block comes from its own generator, seeded
    from ``seed`` (any int64) and i only, and is filled step-major, so step t's values do not depend on ``steps``.
    torch's CPU generator reads 32 bits of a seed (``s`` and ``s + 2**32`` drew the same): the low half seeds the
    prompts' seeds, and the high half (two's complement) is mixed into each of them (``_HIGH``; a seed below 2**32
    draws as before), so that seeds differing only above bit 32 — ``s`` and ``s - 2**63`` — draw differently."""
    return seeds_uniforms((seed,), prompts, n, steps, device)


def seeds_uniforms(seeds: Sequence[int], prompts: int, n: int, steps: int, device: torch.device) -> Tensor:
    """``[steps, len(seeds) * prompts * n]``: columns ``k * prompts * n ...`` are ``uniforms(seeds[k], ...)``, bit for
    bit, all filled in one buffer (batched trials of their own seeds: one allocation and one reshape, not one each)."""
    # Each prompt's stream is its own generator's (CPU: a Mersenne twister; CUDA: Philox), and no torch call draws
    # several generators' streams at once: one generator, re-seeded per prompt, fills each prompt's block in place.
    blocks = torch.empty(len(seeds) * prompts, steps, n, device=device)  # seed k's prompt i: blocks[k * prompts + i]
    each = iter(blocks.unbind(0))  # contiguous [steps, n] each, as torch.rand(steps, n)'s own
    cpu, generator = torch.Generator(), torch.Generator(device=device)
    for seed in seeds:
        low, high = seed % 2**32, seed % 2**64 >> 32
        mix = high * _HIGH % 2**62  # odd: its low 32 bits differ for each high half, and are 0 only for 0
        for s in torch.randint(2**62, (prompts,), generator=cpu.manual_seed(low)).tolist():
            next(each).uniform_(generator=generator.manual_seed(s ^ mix))  # what torch.rand(steps, n, ...) draws
    return blocks.permute(1, 0, 2).reshape(steps, len(seeds) * prompts * n)


@dataclass
class Drawn:
    """What ``draw`` decoded, row ``i * n + j`` being sample j of prompt i: ``tokens`` and their untempered
    ``logprobs`` ``[rows, steps]``, each row's ``lengths`` (its tokens are ``[:length]``) and whether it
    ``stopped`` (EOS or a stop string) rather than reaching ``max_tokens``."""

    tokens: Tensor
    logprobs: Tensor
    lengths: Tensor
    stopped: Tensor

    def finite(self) -> Tensor:
        """Per row: whether every log-prob of its tokens is finite (slots past its length do not count)."""
        unused = torch.arange(self.logprobs.shape[1], device=self.logprobs.device) >= self.lengths[:, None]
        return (torch.isfinite(self.logprobs) | unused).all(dim=1)


def generate(
    decoder: Decoder,
    prompts: Sequence[Sequence[int]],
    n: int,
    settings: Settings,
    seed: int,
    codec: Codec,
    device: torch.device,
    chooser: Pick = pick,
    cached: bool = True,
) -> list[list[wire.SampledSequence]]:
    """``n`` completions of each prompt, as ``[prompt][sample]``; ``Diverged`` if a log-prob is not finite.
    ``cached``: the decoder keeps a KV cache, so a prompt's samples after its first reuse its prefill (a plain
    module's ``RecomputeDecoder`` reruns every row's whole sequence: no hits)."""
    noise = uniforms(seed, len(prompts), n, settings.max_tokens, device)
    drawn = draw(decoder, prompts, n, settings, noise, codec, device, chooser)
    if not bool(drawn.finite().all()):
        raise Diverged(DIVERGED)
    reused = [len(p) if cached else 0 for p in prompts]
    return _sequences(drawn.tokens, drawn.logprobs, drawn.lengths, drawn.stopped, reused, n)


def draw(
    decoder: Decoder,
    prompts: Sequence[Sequence[int]],
    n: int,
    settings: Settings,
    noise: Tensor,
    codec: Codec,
    device: torch.device,
    chooser: Pick = pick,
) -> Drawn:
    """Decode ``n`` completions of each prompt with the given randomness: ``noise`` ``[max_tokens, rows]``,
    row ``i * n + j``'s uniforms in column ``i * n + j`` (``uniforms`` of one seed, or several seeds' blocks
    side by side: batched trials sample every member's prompts in one batch, each with its own seed)."""
    if tuple(noise.shape) != (settings.max_tokens, len(prompts) * n):
        raise ValueError(
            f"noise has shape {tuple(noise.shape)}; need [max_tokens, prompts * n] = "
            f"[{settings.max_tokens}, {len(prompts) * n}]"
        )
    ids, mask = left_pad(prompts, 1, device)  # each prompt once: the decoder repeats its keys and values n times
    B, T = len(prompts) * n, settings.max_tokens
    eos = torch.tensor(settings.eos, dtype=torch.long, device=device) if settings.eos else None
    ended = torch.zeros(B, dtype=torch.bool, device=device)
    matchers = [StopMatcher(codec, settings.stop) for _ in range(B)] if settings.stop else None
    # per step, [B] each, stacked at the end: no per-step writes into [B, T] buffers
    tokens: list[Tensor] = []
    logps: list[Tensor] = []
    hits: list[Tensor] = []
    us = noise[:, :, None].unbind(0)  # each step's uniforms as a column [B, 1], as ``choice.choose`` takes them
    logits = decoder.prefill(ids, mask, n)
    for t in range(T):
        nxt, logp = chooser(logits, us[t], settings.temperature, settings.top_p, settings.top_k)
        tokens.append(nxt)
        logps.append(logp)
        if eos is not None or matchers is not None:  # else no row can end before max_tokens
            hits.append(_hit(nxt, eos, matchers, ended))
            ended |= hits[-1]
        if t + 1 == T or (hits and (matchers is not None or (t + 1) % CHECK_EVERY == 0) and bool(ended.all())):
            break
        logits = decoder.step(nxt)
    return Drawn(_columns(tokens, B, torch.long, device), _columns(logps, B, torch.float32, device),
                 _lengths(hits, B, T, device), ended)  # fmt: skip


def _hit(nxt: Tensor, eos: Tensor | None, matchers: list[StopMatcher] | None, ended: Tensor) -> Tensor:
    """Per row: whether its new token ``nxt`` is an EOS or completes a stop string (rows ``ended`` already are
    not pushed: what they match no longer counts)."""
    hit = torch.isin(nxt, eos) if eos is not None else torch.zeros_like(ended)
    if matchers is not None:  # stop strings need the text: one host transfer per token
        rows = zip(matchers, nxt.tolist(), ended.tolist(), strict=True)
        hit |= torch.tensor([not done and m.push(tok) for m, tok, done in rows], device=nxt.device)
    return hit


def _columns(steps: list[Tensor], rows: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """The steps' ``[rows]`` values side by side, ``[rows, len(steps)]``."""
    return torch.stack(steps, dim=1) if steps else torch.zeros(rows, 0, dtype=dtype, device=device)


def _lengths(hits: list[Tensor], rows: int, max_tokens: int, device: torch.device) -> Tensor:
    """Each row's length: up to its first hit (``_hit``), inclusive, else ``max_tokens``."""
    if not hits:
        return torch.full((rows,), max_tokens, dtype=torch.long, device=device)
    hit = torch.stack(hits)  # [steps, rows]
    return torch.where(hit.any(0), hit.int().argmax(0) + 1, max_tokens)  # argmax: the first of equal maxima


def _sequences(
    tokens: Tensor, logps: Tensor, lengths: Tensor, ended: Tensor, prompts: Sequence[int], n: int
) -> list[list[wire.SampledSequence]]:
    """``[prompt][sample]``; ``prompts``: each prompt's tokens that its samples after the first reused (its
    prefill ran once: ``prompt_cache_hit_tokens``, the tokens a sample reused rather than computed; 0 uncached)."""
    toks, lps, lens, stops = tokens.tolist(), logps.tolist(), lengths.tolist(), ended.tolist()
    out: list[list[wire.SampledSequence]] = [[] for _ in prompts]
    for row, (t, lp, k, stop) in enumerate(zip(toks, lps, lens, stops, strict=True)):
        out[row // n].append(
            wire.SampledSequence(
                tokens=t[:k], logprobs=lp[:k], stop_reason=STOP if stop else LENGTH,
                prompt_cache_hit_tokens=prompts[row // n] if row % n else 0,
            )
        )  # fmt: skip
    return out


def prompt_logprobs(
    chunks: Iterable[Tensor], prompt: Sequence[int], k: int, device: torch.device
) -> tuple[list[float], list[wire.PromptTopLogprobs] | None]:
    """Log-prob of each prompt token given the ones before it (0.0 for the first), and the top ``k``.
    ``chunks``: the logits after ``prompt[:-1]``, in consecutive chunks of positions (``prompt_logits``)."""
    values, tops = [0.0], [wire.PromptTopLogprobs()] if k else None
    done = 0
    for logits in chunks:
        logp = torch.log_softmax(logits.float(), dim=-1)
        targets = torch.tensor(prompt[done + 1 : done + 1 + len(logp)], device=device)
        values += logp.gather(-1, targets[:, None])[:, 0].tolist()
        if tops is not None:
            top = logp.topk(min(k, logp.shape[-1]), dim=-1)
            tops += [
                wire.PromptTopLogprobs(token_ids=i, logprobs=v)
                for i, v in zip(top.indices.tolist(), top.values.tolist(), strict=True)
            ]
        done += len(logp)
    return values, tops
