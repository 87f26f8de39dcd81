"""The step loop of batched trials: one RL step (``rlnb.tasks.rl_step``) for every member of an ensemble.

Per step, as a trial alone does it — sample → reward → GRPO forward-backward → optim-step → weights-sync —
but each phase once for all members: one ``sampling.generate`` over every member's prompts (row k*B + b is
member k's row b, drawn from the member's own ``uniforms`` block), rewards and group advantages per member,
one vmapped forward and one backward of the sum of the members' losses (each loss is ``losses.compute`` of
that member alone, and a member's weights get only its own loss's gradient), one optimizer update. A member
that fails leaves the stack before the update, so the failed step changes nothing of it; what each member's
run records, and how it fails, follows its session alone (see ``Ensemble._step``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from rlnb import wire
from rlnb.batched.members import Hooks, Member, MemberResult, own_errors, params_at
from rlnb.batched.optim import StackedOptimizer, no_gradient, plan
from rlnb.batched.options import EngineOptions, StepOptions
from rlnb.batched.recorder import Op, Recorder, member_config
from rlnb.batched.rollouts import member_losses, policy_batch, prompt_tokens, sample_output
from rlnb.batched.stacked import StackedModel
from rlnb.engine import handlers
from rlnb.engine.handlers import optim_metrics
from rlnb.engine.models.factory import build_adapter
from rlnb.engine.sampling import DIVERGED, Drawn, Settings, draw, uniforms
from rlnb.engine.worker import failure
from rlnb.errors import describe
from rlnb.params import OptimizerParams
from rlnb.tasks import SEED_STRIDE, StepReport, Task
from rlnb.tasks.rollouts import Rollout, completion_rows, prompt_texts, score, step_metrics, unscored
from rlnb.wire import OperationErrorCode as Code
from rlnb.wire import OperationKind as Kind
from rlnb.wire import OptimizerKind


class _CallbackFailed(Exception):
    """The caller's ``on_step`` / ``on_done`` raised: that is the caller's error, not the members'."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class Ensemble:
    """The members still training (``live[k]`` is the member in row k of the stacked model) and their loop."""

    def __init__(
        self, model: str, optimizer: OptimizerKind, members: list[Member], *, steps: int, task: Task,
        runs_dir: str | Path | None, hooks: Hooks, engine: EngineOptions, step: StepOptions, keep_weights: bool,
    ) -> None:
        self.members, self.kind, self.steps, self.task, self.hooks = members, optimizer, steps, task, hooks
        self.keep_weights = keep_weights
        self.group_size = task.group_size if step.group_size is None else step.group_size
        self.loss, self.loss_params = step.loss_type_and_params()
        device, ns_dtype, muon_scaling = engine.torch_device(), engine.ns(), engine.muon_scaling
        adapters = [build_adapter(model, seed=m.seed, device=device) for m in members]  # as connect builds them
        first = adapters[0]
        adam, groups = plan(first.module, optimizer, first.embedding_params())
        self.model = StackedModel([a.module for a in adapters], adam + [n for g in groups for n in g])
        self.optim = StackedOptimizer(self.model, optimizer, adam, groups, muon_scaling, ns_dtype)
        self.codec, self.device, self.context_length = first.codec, device, first.context_length
        self.prompts = prompt_tokens(self.codec, task, first.vocab_size)
        self.prompt_texts = prompt_texts(task, self.prompts, self._completion_text)
        self.longest = max(len(p) for p in self.prompts) + task.max_tokens
        if self.longest > first.context_length:
            raise ValueError(f"task {task.name!r}: prompt + max_tokens = {self.longest} tokens exceed the model's "
                             f"context of {first.context_length}")
        self.settings = Settings(
            max_tokens=task.max_tokens, temperature=float(step.temperature), eos=self.codec.eos_token_ids
        )
        ensemble = f"ensemble-{time.strftime('%Y%m%d-%H%M%S')}-{id(self):x}"
        muon_names = [n for g in groups for n in g]
        self.records = Recorder.open_all([
            ({**member_config(first, optimizer, muon_scaling, ns_dtype, muon_names, adam, seed=m.seed,
                              ensemble=ensemble, index=i, members=len(members)), **m.annotations}, m.run_id)
            for i, m in enumerate(members)
        ], runs_dir)  # fmt: skip
        self.results: list[MemberResult | None] = [None] * len(members)
        self.live = list(range(len(members)))
        self.rewards: list[list[float]] = [[] for _ in members]
        self.losses: list[list[float]] = [[] for _ in members]
        self.start = time.perf_counter()

    # -- the run ------------------------------------------------------------------------------------

    def run(self) -> list[MemberResult]:
        """Every step, then the results in member order. Histories are closed whatever happens."""
        try:
            try:
                for i in range(self.steps):
                    if not self.live:
                        break
                    if self.hooks.stop.is_set():
                        self._end(list(self.live), "STOPPED", f"stopped after {i} of {self.steps} steps")
                        break
                    try:
                        self._step(i)
                    except _CallbackFailed:
                        raise
                    except Exception as exc:  # noqa: BLE001 - the shared step broke: so did every live member's trial
                        self._crash(*failure(exc, handlers.classify))
                self._end(list(self.live), "COMPLETED", None)
            except KeyboardInterrupt:  # as a sweep's Ctrl-C: stop, keep what finished
                self.hooks.stop.set()
                for m in list(self.live):
                    self.records[m].abandon("the session was stopped while this operation ran")
                    self._end([m], "STOPPED", f"stopped after {len(self.rewards[m])} of {self.steps} steps")
        except _CallbackFailed as exc:  # on_step / on_done raised (in the Ctrl-C handler too): the caller's error
            raise exc.error from None
        finally:
            for rec in self.records:
                rec.abandon("the session was stopped before this ran")
                rec.close()
        return [r for r in self.results if r is not None]

    def _crash(self, code: Code, message: str) -> None:
        for m in self.live:
            self.records[m].abandon(message, code)
        self._end(list(self.live), "FAILED", f"{code}: {message}")

    def _end(self, members: list[int], status: str, reason: str | None) -> None:
        """``members`` leave the ensemble with their final result (their weights as they are now)."""
        if not members:
            return
        now = time.perf_counter() - self.start
        for m in members:
            weights = self.model.state(self.live.index(m)) if self.keep_weights else None
            self.results[m] = MemberResult(
                status, reason, self.rewards[m], self.losses[m], self.records[m].history, now, weights
            )
        keep = [k for k, m in enumerate(self.live) if m not in members]
        self.model.keep(keep)
        self.optim.keep(keep)
        self.live = [self.live[k] for k in keep]
        for m in members:
            self.records[m].close()
            self._notify(self.hooks.on_done, m, self.results[m])

    @staticmethod
    def _notify(callback: Callable[..., Any] | None, *args: Any) -> Any:
        try:
            return callback(*args) if callback is not None else None
        except Exception as exc:
            raise _CallbackFailed(exc) from exc

    # -- one step -----------------------------------------------------------------------------------

    def _step(self, i: int) -> None:
        """One RL step for every live member, with the records and failures of ``rl_step`` on a session:

        * the step's params cannot be made (a schedule raised, a wrong kind): FAILED before sampling;
        * params the engine refuses (eps 0 in the weights' dtype, a step size past it): the step samples and
          trains, its optim-step fails INVALID_INPUT (nothing changed), weights-sync publishes the unchanged step;
        * sampled log-probs not finite: the sample FAILED NON_FINITE_LOSS, as the sample handler fails it;
        * the reward raised, or the advantages are not finite (``rlnb.tasks.score`` refuses them): the sample
          is recorded COMPLETED, then FAILED with nothing more;
        * forward-backward fails (INVALID_INPUT, NON_FINITE_LOSS: no gradients): its optim-step completes
          with no gradients (norm 0, nothing changes) and weights-sync publishes step + 1, as a session
          runs them; the trial is FAILED with the forward-backward's error;
        * a non-finite gradient norm: optim-step FAILED NON_FINITE_LOSS (nothing changed), weights-sync
          publishes the unchanged step; the trial is FAILED with that error.
        """
        params, refused = self._params(i)
        if not self.live:
            return
        rollouts, drawn = self._sample(i)
        if not self.live:
            return
        ops = {}
        for m in self.live:  # submitted back to back once the samples are in, as rl_step does
            rec, sent = self.records[m], params[m].model_dump(exclude_unset=True)
            fb, opt = rec.submit(Kind.FORWARD_BACKWARD), rec.submit(Kind.OPTIM_STEP, sent)
            ops[m] = (fb, opt, rec.submit(Kind.WEIGHTS_SYNC))
        hps = {m: params[m].resolved() for m in self.live}
        fb_errors, fb_results = self._forward_backward(rollouts, drawn, {m: o[0] for m, o in ops.items()})
        for m in self.live:
            self.records[m].running(ops[m][1])
        norms = self.optim.norms()
        grad_norms, failed = norms.total.tolist(), {}
        for k, m in enumerate(self.live):
            rec, (_, opt, sync) = self.records[m], ops[m]
            if m in refused:  # as the engine's optim-step checks them first, whatever the forward-backward did
                rec.fail(opt, Code.INVALID_INPUT, refused[m])
                rec.history.log_completions(rec.step + 1, completion_rows(rollouts[m]))  # as rl_step keeps them
                failed[m] = f"{Code.INVALID_INPUT}: {refused[m]}"
            elif m in fb_errors:  # no gradients: the step completes and changes nothing
                rec.step += 1
                stats = no_gradient(hps[m])
                rec.complete(opt, wire.OptimStepResult(step=rec.step, metrics=optim_metrics(stats, hps[m])))
                rec.history.log_completions(rec.step, completion_rows(rollouts[m]))
                failed[m] = fb_errors[m]
            elif not math.isfinite(grad_norms[k]):
                message = f"gradient norm is {grad_norms[k]}; parameters and optimizer state unchanged"
                rec.fail(opt, Code.NON_FINITE_LOSS, message)
                rec.history.log_completions(rec.step + 1, completion_rows(rollouts[m]))  # as rl_step keeps them
                failed[m] = f"{Code.NON_FINITE_LOSS}: {message}"
            else:
                continue
            self._sync(m, sync)
        kept = [k for k, m in enumerate(self.live) if m not in failed]
        norms = norms.select(torch.tensor(kept, dtype=torch.long, device=self.device))
        for m, reason in failed.items():
            self._end([m], "FAILED", reason)  # before the update: it changes nothing of theirs
        stats_of = self.optim.step([hps[m] for m in self.live], norms) if self.live else []
        pruned: dict[int, str] = {}
        reports: dict[int, StepReport] = {}  # every member's step is recorded before any on_step (Ctrl-C in one)
        for m, stats in zip(list(self.live), stats_of, strict=True):
            rec, (_, opt, sync) = self.records[m], ops[m]
            rec.step += 1
            rec.complete(opt, wire.OptimStepResult(step=rec.step, metrics=optim_metrics(stats, hps[m])))
            self._sync(m, sync)
            rec.history.log_completions(rec.step, completion_rows(rollouts[m]))
            metrics = step_metrics(rollouts[m], fb_results[m].metrics)  # what rl_step logs
            rec.history.log(rec.step, **metrics)
            self.rewards[m].append(metrics["reward"])
            self.losses[m].append(fb_results[m].loss)
            rewards = [r.reward for g in rollouts[m] for r in g]
            loss, done = fb_results[m].loss, wire.OperationStatus.COMPLETED
            reports[m] = StepReport(rec.step, metrics["reward"], loss, stats.grad_norm, done, rewards, metrics)
        for m, report in reports.items():
            verdict = self._notify(self.hooks.on_step, m, report)
            if verdict is not None and not isinstance(verdict, str):  # False pruned it, with the reason 'False'
                raise _CallbackFailed(TypeError(f"on_step returned {verdict!r} for member {m}: return None to go on, "
                                                "or a reason (a str) to prune it"))  # fmt: skip
            if verdict is not None and len(self.rewards[m]) < self.steps:
                pruned[m] = verdict
        for m, reason in pruned.items():
            self._end([m], "PRUNED", reason)

    def _params(self, i: int) -> tuple[dict[int, OptimizerParams], dict[int, str]]:
        """Each live member's params at step ``i``, and why the engine refuses some (their optim-step fails as a
        session's); a member whose params raise (InvalidParams, a schedule's bug) leaves FAILED with it."""
        out, bad, refused = {}, {}, {}
        for m in self.live:
            try:
                value = params_at(self.members[m], i, self.kind)
                hp = value.resolved()
            except Exception as exc:  # noqa: BLE001 - the member's own code: its trial fails, not the ensemble
                bad[m] = f"{type(exc).__name__}: {exc}"
                continue
            out[m] = value
            if (why := self.optim.refusal(hp)) is not None:
                refused[m] = why
        for m, reason in bad.items():
            self._end([m], "FAILED", reason)
        return out, refused

    def _sample(self, i: int) -> tuple[dict[int, list[list[Rollout]]], Drawn]:
        """Every live member's samples, rewards and advantages (members whose samples cannot be trained on leave)."""
        P, n, T, live = len(self.prompts), self.group_size, self.settings.max_tokens, list(self.live)
        ops = {m: self.records[m].submit(Kind.SAMPLE) for m in live}
        for m in live:
            self.records[m].running(ops[m])
        seeds = [self.members[m].seed * SEED_STRIDE + i for m in live]  # the step seed, as sample(seed=) takes it
        noise = torch.cat([uniforms(s, P, n, T, self.device) for s in seeds], dim=1)  # member k: columns k*P*n...
        decoder = self.model.decoder(P * n, self.longest)
        drawn = draw(decoder, self.prompts * len(live), n, self.settings, noise, self.codec, self.device)
        finite = drawn.finite().view(len(live), -1).all(dim=1).tolist()
        rollouts, bad = {}, {}
        for k, m in enumerate(live):
            if not finite[k]:  # as the sample handler fails it
                self.records[m].fail(ops[m], Code.NON_FINITE_LOSS, DIVERGED)
                bad[m] = f"{Code.NON_FINITE_LOSS}: {DIVERGED}"
                continue
            out = sample_output(drawn, P, n, range(k * P * n, (k + 1) * P * n), self.records[m].step)
            self.records[m].complete(ops[m], out)
            groups = unscored(self.prompt_texts, out.results, self._completion_text)
            try:  # rewards and group advantages as rl_step computes them
                rollouts[m] = score(self.task, groups)
            except own_errors() as exc:  # the user's reward function, or advantages that cannot train
                self.records[m].history.log_completions(self.records[m].step + 1, completion_rows(groups))
                bad[m] = describe(exc)  # an exception whose str() raises is named by its type
        for m, reason in bad.items():
            self._end([m], "FAILED", reason)
        if bad:  # their rows leave the batch too
            keep = torch.tensor([k * P * n + r for k, m in enumerate(live) if m not in bad for r in range(P * n)])
            drawn = Drawn(drawn.tokens[keep], drawn.logprobs[keep], drawn.lengths[keep], drawn.stopped[keep])
        return rollouts, drawn

    def _completion_text(self, tokens: Sequence[int]) -> str:
        """What a reward reads, as ``rl_step`` decodes it: no ending EOS, no special tokens."""
        return self.codec.decode(tokens, skip_special=True)

    def _forward_backward(
        self, rollouts: dict[int, list[list[Rollout]]], drawn: Drawn, ops: dict[int, Op]
    ) -> tuple[dict[int, str], dict[int, wire.ForwardBackwardResult]]:
        """One forward and one backward for all; per member its result, or why its forward-backward failed."""
        for m in self.live:
            self.records[m].running(ops[m])
        K, n, B = len(self.live), self.group_size, len(self.prompts) * self.group_size
        advantages = [r.advantage for m in self.live for g in rollouts[m] for r in g]
        batch = policy_batch(self.prompts, [r // n for r in range(B)] * K, drawn, advantages)
        width = batch.ids.shape[1]
        lp, entropy = self.model.logprobs(batch.ids.view(K, B, width), batch.targets.view(K, B, width))
        losses = member_losses(lp.view(K * B, width), entropy.view(K * B, width), batch, K, self.loss,
                               self.loss_params, self.context_length)
        results = dict(zip(self.live, losses, strict=True))
        terms = [r.loss for r in results.values() if r.loss is not None]
        self.model.backward(torch.stack(terms).sum() if terms else None)  # each member: its own loss's gradient
        errors, values = {}, {}
        for m, r in results.items():
            if r.result is not None:
                self.records[m].complete(ops[m], r.result)
                values[m] = r.result
            elif r.error is not None:
                self.records[m].fail(ops[m], *r.error)
                errors[m] = f"{r.error[0]}: {r.error[1]}"
        return errors, values

    def _sync(self, m: int, op: Op) -> None:
        rec = self.records[m]
        rec.running(op)
        rec.complete(op, wire.WeightsSyncResult(weights_version=rec.step))
