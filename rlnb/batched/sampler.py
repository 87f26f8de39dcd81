"""The sampling half of an ensemble's step: every member's samples in one draw, then its rewards and advantages.

As ``rl_step`` samples for a session: the task's prompts as tokens, one ``sampling.draw`` over every member's
prompts (row k*B + b is member k's row b, drawn from the member's own ``uniforms`` block), each member's sample
record with what a sample operation returns, then its rewards and group advantages
(``rlnb.tasks.rollouts.score_texts``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from rlnb.batched.failures import own_errors
from rlnb.batched.reasons import failure_reason
from rlnb.batched.recorder import Recorder
from rlnb.batched.rollouts import DrawnLists, sample_output
from rlnb.batched.stacked import StackedModel
from rlnb.engine.sampling import DIVERGED, Drawn, Settings, draw, seeds_uniforms
from rlnb.errors import describe
from rlnb.tasks import Task
from rlnb.tasks.rollouts import Rollout, completion_rows, prompt_texts, score_texts, unscored
from rlnb.tasks.task import task_prompt_ids
from rlnb.text.codec import Codec, decode_all
from rlnb.wire import OperationErrorCode as Code
from rlnb.wire import OperationKind as Kind


@dataclass
class Sampled:
    """One step's samples: ``rollouts`` (scored) and ``drawn`` rows of the members that train on them, in order,
    and why each other member cannot (``failed``: its trial's reason)."""

    rollouts: dict[int, list[list[Rollout]]]
    drawn: Drawn
    failed: dict[int, str]


class Sampler:
    """What every member samples at a step: the task's prompts, ``group_size`` completions of each, with the
    task's sampling settings."""

    def __init__(
        self,
        codec: Codec,
        task: Task,
        vocab_size: int,
        context_length: int,
        group_size: int,
        temperature: float,
        device: torch.device,
    ) -> None:
        self.codec, self.task, self.group_size, self.device = codec, task, group_size, device
        # what a reward reads, as rl_step decodes it: no ending EOS, no special tokens (a step's completions go
        # through ``decode_all``, the same texts; this decodes the prompts and a failed step's rows)
        self.completion_text: Callable[[Sequence[int]], str] = functools.partial(codec.decode, skip_special=True)
        self.prompts = task_prompt_ids(task, codec, vocab_size, context_length)  # before any member runs
        self.prompt_texts = prompt_texts(task, self.prompts, self.completion_text)
        self.longest = max(len(p) for p in self.prompts) + task.max_tokens
        self.settings = Settings(max_tokens=task.max_tokens, temperature=float(temperature), eos=codec.eos_token_ids)

    def sample(self, model: StackedModel, records: dict[int, Recorder], seeds: Sequence[int]) -> Sampled:
        """The samples of the members of ``records`` (rows of ``model``, in order), each drawn with its step seed
        in ``seeds``. A member whose samples cannot be trained on is ``failed``, its rows left out of ``drawn``:
        log-probs not finite (its sample FAILED NON_FINITE_LOSS, as the sample handler fails it), or its reward
        raised or its advantages are not finite (its sample COMPLETED, the step's completions kept unscored)."""
        P, n, T, live = len(self.prompts), self.group_size, self.settings.max_tokens, list(records)
        ops = {m: records[m].submit(Kind.SAMPLE) for m in live}
        for m in live:
            records[m].running(ops[m])
        noise = members_uniforms(seeds, P, n, T, self.device)
        decoder = model.decoder(P * n, self.longest)
        drawn = draw(decoder, self.prompts * len(live), n, self.settings, noise, self.codec, self.device)
        finite = drawn.finite().view(len(live), -1).all(dim=1).tolist()
        lists = DrawnLists.of(drawn)  # every member's record reads its rows from these
        tokens = [len(p) for p in self.prompts]
        rollouts, failed = {}, {}
        for k, m in enumerate(live):
            if not finite[k]:  # as the sample handler fails it
                records[m].fail(ops[m], Code.NON_FINITE_LOSS, DIVERGED)
                failed[m] = failure_reason(Code.NON_FINITE_LOSS, DIVERGED)
                continue
            out = sample_output(lists, tokens, n, range(k * P * n, (k + 1) * P * n), records[m].step)
            records[m].complete(ops[m], out)
            texts = decode_all(self.codec, [s.tokens for r in out.results for s in r.sequences], skip_special=True)
            try:  # rewards and group advantages as rl_step computes them
                rollouts[m] = score_texts(self.task, self.prompt_texts, out.results, texts)
            except own_errors() as exc:  # the user's reward function, or advantages that cannot train
                groups = unscored(self.prompt_texts, out.results, self.completion_text)  # the rows it keeps
                records[m].history.log_completions(records[m].step + 1, completion_rows(groups))
                failed[m] = describe(exc)  # an exception whose str() raises is named by its type
        if failed:  # their rows leave the batch too
            rows = [k * P * n + r for k, m in enumerate(live) if m not in failed for r in range(P * n)]
            keep = torch.tensor(rows, dtype=torch.long)
            drawn = Drawn(drawn.tokens[keep], drawn.logprobs[keep], drawn.lengths[keep], drawn.stopped[keep])
        return Sampled(rollouts, drawn, failed)


def members_uniforms(seeds: Sequence[int], prompts: int, n: int, steps: int, device: torch.device) -> Tensor:
    """``[steps, len(seeds) * prompts * n]``: member k's columns ``k*prompts*n ...`` are ``uniforms(seeds[k], ...)``,
    what its trial alone draws. Each distinct seed's block is drawn once, all into one buffer (``seeds_uniforms``: a
    randint and a generator seeded per prompt a seed, the buffer's allocation and reshape shared), and copied to each
    member that has it: an ensemble of one seed's learning rates (a sweep's usual grid) draws one block for all its
    members, in one gather (``tests/batched/test_rollouts.py`` compares with each seed's own)."""
    distinct = list(dict.fromkeys(seeds))
    blocks = seeds_uniforms(distinct, prompts, n, steps, device)
    if len(distinct) == len(seeds):
        return blocks
    which = torch.tensor([distinct.index(s) for s in seeds], device=device)
    return blocks.view(steps, len(distinct), prompts * n).index_select(1, which).view(steps, -1)
