"""The step loop of batched trials: one RL step (``rlnb.tasks.rl_step``) for every member of an ensemble.

Per step, as a trial alone does it — sample → reward → GRPO forward-backward → optim-step → weights-sync —
but each phase once for all members: one ``sampling.draw`` over every member's prompts (row k*B + b is
member k's row b, drawn from the member's own ``uniforms`` block), rewards and group advantages per member,
one vmapped forward and one backward of the sum of the members' losses (each loss is ``losses.compute`` of
that member alone, and a member's weights get only its own loss's gradient), one optimizer update. A member
that fails leaves the stack before the update, so the failed step changes nothing of it; what each member's
run records, and how it fails, follows its session alone (``rlnb.batched.failures``). The sampling half of a
step is ``rlnb.batched.sampler``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import cast

import torch

from rlnb import wire
from rlnb.batched.failures import StepParams, deferred_interrupt, fail_optim_step, step_params
from rlnb.batched.members import CallbackFailed, Hooks, Member, MemberResult
from rlnb.batched.memory import build_members, check_memory
from rlnb.batched.optim import StackedOptimizer, plan
from rlnb.batched.options import EngineOptions, StepOptions
from rlnb.batched.reasons import failure_reason
from rlnb.batched.recorder import Op, Recorder, member_config
from rlnb.batched.rollouts import member_losses, policy_batch
from rlnb.batched.sampler import Sampler
from rlnb.batched.stacked import StackedModel
from rlnb.engine import handlers
from rlnb.engine.models.factory import build_adapter
from rlnb.engine.optim.failures import GRADIENTS_DROPPED
from rlnb.engine.sampling import Drawn
from rlnb.engine.worker import failure
from rlnb.errors import NOT_RUN, OperationError
from rlnb.params import Hyperparams
from rlnb.tasks import SEED_STRIDE, StepReport, Task
from rlnb.tasks.rollouts import Rollout
from rlnb.wire import OperationErrorCode as Code
from rlnb.wire import OperationKind as Kind
from rlnb.wire import OptimizerKind, TrialStatus


class Ensemble:
    """The members still training (``live[k]`` is the member in row k of the stacked model) and their loop."""

    def __init__(
        self,
        model: str,
        optimizer: OptimizerKind,
        members: list[Member],
        *,
        steps: int,
        task: Task,
        runs_dir: str | Path | None,
        hooks: Hooks,
        engine: EngineOptions,
        step: StepOptions,
        keep_weights: bool,
    ) -> None:
        self.members, self.kind, self.steps, self.hooks = members, optimizer, steps, hooks
        self.keep_weights = keep_weights
        group_size = task.group_size if step.group_size is None else step.group_size
        self.loss, self.loss_params = step.loss_type_and_params()
        device, ns_dtype, muon_scaling = engine.torch_device(), engine.ns(), engine.muon_scaling or wire.MUON_ORIGINAL
        first = build_adapter(model, seed=members[0].seed, device=device)  # as connect builds them
        self.sampler = Sampler(
            first.codec, task, first.vocab_size, first.context_length, group_size, step.temperature, device
        )
        rows, tokens = len(self.sampler.prompts) * group_size, self.sampler.longest
        check_memory(model, len(members), first.module, rows, tokens, device)  # before the other members are built
        others, self.unbuilt = build_members(
            len(members),
            first.module,
            rows,
            tokens,
            device,
            lambda i: build_adapter(model, seed=members[i].seed, device=device),
        )
        adapters = [first, *others]  # members past them are not built: FAILED with ``unbuilt`` at the run's start
        adam, groups = plan(first.module, optimizer, first.embedding_params())
        muon_names = [n for g in groups for n in g]
        self.model = StackedModel([a.module for a in adapters], adam + muon_names)
        self.optim = StackedOptimizer(self.model, optimizer, adam, groups, muon_scaling, ns_dtype)
        self.device, self.context_length = device, first.context_length
        ensemble = f"ensemble-{time.strftime('%Y%m%d-%H%M%S')}-{id(self):x}"
        shared = (first, optimizer, muon_scaling, ns_dtype, muon_names, adam)  # what every member's run config holds
        size = len(adapters)  # the ensemble as built: a member not built has an index past it
        configs = [
            member_config(*shared, seed=m.seed, ensemble=ensemble, index=i, members=size) for i, m in enumerate(members)
        ]
        runs = [({**c, **m.annotations}, m.run_id) for c, m in zip(configs, members, strict=True)]
        self.records = Recorder.open_all(runs[:size], runs_dir) + [Recorder.unbuilt(*run) for run in runs[size:]]
        self.results: list[MemberResult | None] = [None] * len(members)
        self.live = list(range(len(adapters)))
        self.rewards: list[list[float]] = [[] for _ in members]
        self.losses: list[list[float]] = [[] for _ in members]
        self.start = time.perf_counter()

    # -- the run ------------------------------------------------------------------------------------

    def run(self) -> list[MemberResult]:
        """Every step, then the results in member order. Histories are closed whatever happens."""
        try:
            try:
                self._not_built()
                for i in range(self.steps):
                    if not self.live:
                        break
                    if self.hooks.stop.is_set():
                        self._end(list(self.live), TrialStatus.STOPPED, f"stopped after {i} of {self.steps} steps")
                        break
                    try:
                        self._step(i)
                    except CallbackFailed:
                        raise
                    except Exception as exc:  # noqa: BLE001 - the shared step broke: so did every live member's trial
                        self._crash(*failure(exc, handlers.classify))
                self._end(list(self.live), TrialStatus.COMPLETED, None)
            except KeyboardInterrupt:  # as a sweep's Ctrl-C: stop, keep what finished (the caller's stop Event is
                # left as it was: set, it would stop the next run given it)
                for m in list(self.live):
                    self.records[m].abandon("the session was stopped while this operation ran")
                    self._end([m], TrialStatus.STOPPED, f"stopped after {len(self.rewards[m])} of {self.steps} steps")
        except CallbackFailed as exc:  # on_step / on_done raised (in the Ctrl-C handler too): the caller's error
            raise exc.error from None
        finally:
            for rec in self.records:
                rec.abandon(NOT_RUN)
                rec.close()
        return [r for r in self.results if r is not None]

    def _not_built(self) -> None:
        """The members whose models the memory could not hold end FAILED before any step, each told ``on_done``."""
        for m in range(len(self.live), len(self.members)) if self.unbuilt is not None else ():
            history, now = self.records[m].history, time.perf_counter() - self.start
            self.results[m] = MemberResult(TrialStatus.FAILED, self.unbuilt, [], [], history, now, built=False)
            self._done(m)

    def _crash(self, code: Code, message: str) -> None:
        if code == Code.RESOURCE_EXHAUSTED and len(self.live) > 1:  # the step holds every member's activations at once
            message += f" (an ensemble of {len(self.live)} members trains them all at once: run fewer per call)"
        for m in self.live:
            self.records[m].abandon(message, code)
        self._end(list(self.live), TrialStatus.FAILED, failure_reason(code, message))

    def _end(self, members: list[int], status: TrialStatus, reason: str | None) -> None:
        """``members`` leave the ensemble with their final result (their weights as they are now), ``on_done`` told."""
        self._leave(members, status, reason)
        for m in members:
            self._done(m)

    def _done(self, m: int) -> None:
        """Tell ``on_done`` member ``m``'s result (set as it left: ``_leave``, ``_not_built``)."""
        self.hooks.done(m, cast(MemberResult, self.results[m]))

    def _leave(self, members: list[int], status: TrialStatus, reason: str | None) -> None:
        """``_end`` without ``on_done``: the caller's code, which must stay interruptible, is called after. A Ctrl-C
        waits for the model and the optimizer to drop the same rows (one between them: an ``IndexError``)."""
        if not members:
            return
        now = time.perf_counter() - self.start
        with deferred_interrupt():
            for m in members:
                weights = self.model.state(self.live.index(m)) if self.keep_weights else None
                history = self.records[m].history
                self.results[m] = MemberResult(status, reason, self.rewards[m], self.losses[m], history, now, weights)
            keep = [k for k, m in enumerate(self.live) if m not in members]
            self.model.keep(keep)
            self.optim.keep(keep)
            self.live = [self.live[k] for k in keep]
            for m in members:
                self.records[m].close()

    # -- one step -----------------------------------------------------------------------------------

    def _step(self, i: int) -> None:
        """One RL step for every live member, with the records and failures of ``rl_step`` on a session (a member
        that fails leaves before the update, FAILED: ``rlnb.batched.failures``)."""
        params = self._params(i)
        if not self.live:
            return
        rollouts, drawn = self._sample(i)
        if not self.live:
            return
        ops = {}
        for m in self.live:  # submitted back to back once the samples are in, as rl_step does
            rec, sent = self.records[m], params.sent[m].model_dump(exclude_unset=True)
            fb, opt = rec.submit(Kind.FORWARD_BACKWARD), rec.submit(Kind.OPTIM_STEP, sent)
            ops[m] = (fb, opt, rec.submit(Kind.WEIGHTS_SYNC))
        hps = {m: params.sent[m].resolved() for m in self.live}
        fb_errors, fb_results = self._forward_backward(rollouts, drawn, {m: o[0] for m, o in ops.items()})
        for m in self.live:
            self.records[m].running(ops[m][1])
        failed: list[int] = []  # members that failed this step, told after it (a Ctrl-C or a crash in it or not)
        try:
            with deferred_interrupt():  # the update and its records: a Ctrl-C lands after them, as after on_step
                reports = self._update(params, rollouts, ops, hps, (fb_errors, fb_results), failed)
        finally:
            for m in failed:
                self._done(m)
        pruned: dict[int, str] = {}
        for m, report in reports.items():
            verdict = self.hooks.step(m, report)
            if verdict is not None and len(self.rewards[m]) < self.steps:
                pruned[m] = verdict
        for m, reason in pruned.items():
            self._end([m], TrialStatus.PRUNED, reason)

    def _update(
        self,
        params: StepParams,
        rollouts: dict[int, list[list[Rollout]]],
        ops: dict[int, tuple[Op, Op, Op]],
        hps: dict[int, Hyperparams],
        fb: tuple[dict[int, tuple[Code, str]], dict[int, wire.ForwardBackwardResult]],
        failed: list[int],
    ) -> dict[int, StepReport]:
        """The members that cannot train on this step leave (FAILED: ``fail_optim_step``), each added to ``failed`` (for
        the caller to tell ``on_done``); the others are updated, their step recorded as ``rl_step`` records it
        (``Recorder.trained``)."""
        fb_errors, fb_results = fb
        norms = self.optim.norms()
        grad_norms, reasons = norms.total.tolist(), {}
        for k, m in enumerate(self.live):
            fb_error = fb_errors.get(m)
            bad: list[str] = []
            if not math.isfinite(grad_norms[k]):  # all finite and clipped: the norm taken again wide (a session's)
                bad, grad_norms[k] = self.optim.non_finite(k, norms, hps[m].grad_clip_norm)
            reason = fail_optim_step(self.records[m], ops[m][1:], rollouts[m], hps[m], fb_error, grad_norms[k], bad)
            if reason is not None:
                reasons[m] = reason
        kept = [k for k, m in enumerate(self.live) if m not in reasons]
        norms = norms.select(torch.tensor(kept, dtype=torch.long, device=self.device))
        for m, reason in reasons.items():
            self._leave([m], TrialStatus.FAILED, reason)  # before the update: it changes nothing of theirs
            failed.append(m)
        stats_of = self.optim.step([hps[m] for m in self.live], norms) if self.live else []
        reports: dict[int, StepReport] = {}  # every member's step is recorded before any on_step (Ctrl-C in one)
        for m, stats in zip(list(self.live), stats_of, strict=True):
            reports[m] = self.records[m].trained(ops[m][1:], stats, hps[m], rollouts[m], fb_results[m])
            self.rewards[m].append(reports[m].reward)
            self.losses[m].append(reports[m].loss)
        return reports

    def _params(self, i: int) -> StepParams:
        """Each live member's params at step ``i`` (``step_params``); those whose params cannot be made leave."""
        params = step_params({m: self.members[m] for m in self.live}, i, self.kind, self.optim.refusal)
        for m, reason in params.failed.items():
            self._end([m], TrialStatus.FAILED, reason)
        return params

    def _sample(self, i: int) -> tuple[dict[int, list[list[Rollout]]], Drawn]:
        """Every live member's samples, rewards and advantages (members whose samples cannot be trained on leave)."""
        seeds = [self.members[m].seed * SEED_STRIDE + i for m in self.live]  # the step seed, as sample(seed=) takes it
        sampled = self.sampler.sample(self.model, {m: self.records[m] for m in self.live}, seeds)
        for m, reason in sampled.failed.items():
            self._end([m], TrialStatus.FAILED, reason)
        return sampled.rollouts, sampled.drawn

    def _forward_backward(
        self, rollouts: dict[int, list[list[Rollout]]], drawn: Drawn, ops: dict[int, Op]
    ) -> tuple[dict[int, tuple[Code, str]], dict[int, wire.ForwardBackwardResult]]:
        """One forward and one backward for all; per member its result, or why its forward-backward failed."""
        for m in self.live:
            self.records[m].running(ops[m])
        prompts, n = self.sampler.prompts, self.sampler.group_size
        K, B = len(self.live), len(prompts) * n
        advantages = [r.advantage for m in self.live for g in rollouts[m] for r in g]
        batch = policy_batch(prompts, [r // n for r in range(B)] * K, drawn, advantages)
        width = batch.ids.shape[1]
        lp, entropy = self.model.logprobs(*(t.view(K, B, width) for t in (batch.ids, batch.targets, batch.mask != 0)))
        losses, total = member_losses(lp.view(K * B, width), entropy.view(K * B, width), batch, K, self.loss,
                                      self.loss_params, self.context_length)  # fmt: skip
        results = dict(zip(self.live, losses, strict=True))
        try:
            self.model.backward(total)  # each member: its own loss's gradient
        except Exception as exc:  # as a session's failed backward says it; ``run`` fails every member with it
            code, message = failure(exc, handlers.classify)
            raise OperationError(code, f"{message}{GRADIENTS_DROPPED}") from exc
        errors, values = {}, {}
        for m, r in results.items():
            if r.result is not None:
                self.records[m].complete(ops[m], r.result)
                values[m] = r.result
            elif r.error is not None:
                self.records[m].fail(ops[m], *r.error)
                errors[m] = r.error
        return errors, values
