"""``Session``: the notebook's handle on one training session, local or remote.

Every method submits one operation and returns an ``Operation`` at once — it never waits — so a
forward-backward and the optim-step after it pipeline. Inputs are checked before anything is sent
(``rlnb.session.bodies`` builds each operation's body, ``rlnb.session.tokens`` turns prompts into token ids;
the checks are ``rlnb.text.prompts`` and ``rlnb.params``, the opening of its run ``rlnb.history.runs``). Every
operation is recorded in ``session.history``, in the order it was submitted (``rlnb.session.submissions``); the
sessions left open are closed at interpreter exit (``rlnb.session.open_sessions``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlnb import wire
from rlnb.errors import SessionClosed
from rlnb.history import History
from rlnb.history.recording import check_recording
from rlnb.history.runconfig import REMOTE
from rlnb.history.runs import warn_continued, warn_in_memory
from rlnb.lifecycle import shutdown
from rlnb.params import OptimizerParams, params_for
from rlnb.session.backend import Backend
from rlnb.session.bodies import (
    SampleSettings,
    StepParams,
    custom_forward_backward_body,
    forward_backward_body,
    sample_body,
    sample_mismatch,
    weights_sync_body,
)
from rlnb.session.closing import CloseListeners
from rlnb.session.open_sessions import OPEN, close_keeping, refuse_shared_history
from rlnb.session.operation import Operation
from rlnb.session.step_turn import STEP_WAIT, StepTurn
from rlnb.session.submissions import Submissions
from rlnb.session.tokens import decode_tokens, encode_prompt
from rlnb.sinks.base import Sink
from rlnb.sinks.stream import attach
from rlnb.text.codec import Codec, Message, NoTokenizerCodec
from rlnb.text.prompts import prompt_list
from rlnb.wire import OperationKind as Kind

Prompt = str | Sequence[int] | Sequence[Message]
"""A prompt: text, token ids, or chat messages (``[{"role": "user", "content": "..."}]``)."""


class Session:
    """One training session. Build it with ``rlnb.connect(...)``.

    ``history`` records every operation, on disk under ``<runs_dir>/<run_id>/`` (default
    ``./rlnb-runs/<timestamp-optimizer-id>``; ``record=False`` keeps it in memory only); ``step`` is the
    session's optimizer-step count. ``codec`` turns text into tokens and back: the local model's
    tokenizer (bytes for the built-in models), or ``tokenizer=`` given to ``connect`` for a remote one.
    ``sinks`` (``rlnb.sinks.TensorBoard(...)``, ...) receive the run as it goes.
    """

    def __init__(
        self,
        backend: Backend,
        history: History | None = None,
        *,
        runs_dir: str | Path | None = None,
        run_id: str | None = None,
        record: bool = True,
        codec: Codec | None = None,
        sinks: Sink | Sequence[Sink] = (),
    ):
        check_recording(history, runs_dir, run_id, record)
        refuse_shared_history(history)
        self.backend = backend
        self.codec: Codec | None = codec or getattr(backend, "codec", None)
        info = backend.session()  # before the run folder is opened (and locked): this may fail
        made = history is None
        if history is None:
            config = backend.config()
            history = History.create(config, runs_dir, run_id) if record else History(config=config)
        else:
            if history.loaded_from is not None and history.store is None:
                warn_in_memory(history.loaded_from)  # it went on silently in memory: the user meant to go on with it
                history.memory_only_said = True
            made = history.continue_for(backend.config())  # as a run continued by run_id=, its folder locked again
        self.history = history
        self.optimizer = backend.optimizer
        self._step_params = StepParams(self.optimizer)
        self.id: str = info.id
        """The session id (it never changes, so it is read once)."""
        self._ops = Submissions(backend, history, self.id, int(info.step))
        self._turn = StepTurn(self.id)
        self._closed = False
        self._close_listeners = CloseListeners()
        try:  # a warning made an error, a sink that cannot start: the run folder it locked is let go
            warn_continued(history.config.get("run_id"), history.steps_reached(), self._ops.steps_submitted)
            self._sinks = attach(history, sinks) if sinks else None
        except BaseException:
            if made:
                history.close()
            raise
        OPEN.add(self)
        shutdown.end_on_termination()  # a SIGTERM from now on closes it, its records kept

    def __repr__(self) -> str:
        return f"<rlnb.Session {self.id} optimizer={self.optimizer} step={self.step}>"

    def __enter__(self) -> Session:
        """``with rlnb.connect(...) as session:`` closes the session when the block ends."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the session (see ``close``); a close failing as the block raised adds a note (``close_keeping``)."""
        close_keeping(self.close, exc[1] if isinstance(exc[1], BaseException) else None)

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer of this session's model; None for the byte-level built-in models."""
        return self.codec.tokenizer if self.codec is not None else None

    def encode(self, prompt: Prompt) -> list[int]:
        """Token ids of text, of chat messages (the tokenizer's chat template, with the generation
        prompt), or of token ids (unchanged; no tokenizer needed for those, e.g. on Together; a numpy array,
        tensor or iterator of ids too)."""
        return self._encode(prompt, "prompt")

    def _encode(self, prompt: Any, name: str) -> list[int]:
        return encode_prompt(self.codec, prompt, name, self.id)

    def decode(self, tokens: Sequence[int], *, skip_special: bool = False) -> str:
        """Text of token ids; ``skip_special`` leaves out the EOS that ended a completion and the
        tokenizer's special tokens (the text a reward sees). An id outside the model's vocabulary (where the
        session knows it; below 0 always) is a ``ValueError``."""
        return decode_tokens(self.codec, self.backend, tokens, skip_special, self.id)

    @property
    def step(self) -> int:
        """Completed optimizer steps (``Session.step`` in the API)."""
        return int(self.backend.session().step)

    def info(self) -> wire.Session:
        """The session object, as the API's GET returns it."""
        return self.backend.session()

    @property
    def is_remote(self) -> bool:
        """Whether a service runs this session over HTTP (its config's ``backend``), not this process: a copy of it
        (``lr_find``) is then opened there, from a checkpoint the service keeps."""
        return self.history.config.get("backend") == REMOTE

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called: the session takes no more operations."""
        return self._closed

    def on_close(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` once when the session closes (on the thread that closes it), or at once if it has
        closed already (a RunPanel idle on it shows that it closed at once). A bound method is held only as long as
        its object lives; any other function, a lambda too, until it is told. Returns a function that unsubscribes."""
        return self._close_listeners.add(callback)

    def close(self) -> None:
        """Stop the session. Operations not yet finished end FAILED (SESSION_NOT_ACTIVE), and are
        recorded as such before the run's files are closed."""
        self._close(flush_sinks=True)

    def _close(self, flush_sinks: bool) -> None:
        """``flush_sinks=False`` (interpreter exit) leaves the sinks to the exit's sink phase, which
        flushes every session's sinks within one deadline, not one per session."""
        self._closed = True
        OPEN.discard(self)
        try:
            self.backend.close()  # a remote stop may fail (server gone): the run is closed all the same
        except BaseException as exc:
            if not isinstance(exc, Exception):  # interrupted (Ctrl-C): the exit closes it again if nobody does
                OPEN.add(self)
            raise
        finally:
            try:  # config.json says what the session ran with, including what changed meanwhile (thread counts)
                self.history.annotate(**self.backend.config())
            finally:
                try:
                    self.history.close()
                finally:
                    self._close_listeners.tell()  # closed now, whatever failed on the way
            if self._sinks is not None and flush_sinks:
                self._sinks.close()  # after the run store: a slow sink never holds it open

    # -- operations ------------------------------------------------------------------------------

    def _submit(self, kind: Kind, body: wire._Model | None, params: dict[str, Any] | None = None, transform: Any = None,
                mismatch: Callable[[Any], str | None] | None = None) -> Operation[Any]:  # fmt: skip
        """One operation, in submission order (``Submissions.submit``); a closed session takes none."""
        if self._closed:
            raise SessionClosed(f"session {self.id} is closed")
        return self._ops.submit(kind, body, self, params, transform, mismatch)  # kept alive by what it submitted

    def wait(self, timeout: float | None = None) -> None:
        """Block until every operation submitted so far has finished (COMPLETED or FAILED); ``OperationTimeout``
        after ``timeout`` seconds (None or infinity: no limit; NaN, a negative number: ``ValueError``)."""
        self._ops.wait(timeout)

    def stepping(self, timeout: float | None = STEP_WAIT) -> contextlib.AbstractContextManager[None]:
        """``with session.stepping():`` one step at a time on this session (``rl_step`` holds it): another thread's
        step waits for the block to end, at most ``timeout`` seconds (default ``STEP_WAIT``, 600; None: no limit),
        then ``SessionBusy`` naming the thread in the middle of its step. Re-entrant on one thread."""
        return self._turn.hold(timeout)

    def forward_backward(
        self,
        samples: Sequence[wire.Sample | dict[str, Any]],
        loss: str | wire.LossConfig | dict[str, Any] = "cross_entropy",
        loss_params: dict[str, Any] | None = None,
        *,
        forward_only: bool = False,
        return_loss_fn_outputs: bool = False,
    ) -> Operation[wire.ForwardBackwardResult]:
        """Compute the loss over ``samples`` and accumulate gradients (until the next optim-step).

        ``samples`` are wire ``Sample``s (or dicts), e.g. from ``rlnb.samples.cross_entropy`` /
        ``rlnb.samples.policy``. ``loss`` is a short name (``"grpo"``), a wire type or a LossConfig;
        ``loss_params`` fills the loss's params object (``{"beta": 0.1}``).
        """
        body = forward_backward_body(
            self.backend, samples, loss, loss_params,
            forward_only=forward_only, return_loss_fn_outputs=return_loss_fn_outputs,
        )  # fmt: skip
        return self._submit(Kind.FORWARD_BACKWARD, body, {wire.FORWARD_ONLY: True} if forward_only else None)

    def custom_forward_backward(self, samples: Sequence[wire.Sample | dict[str, Any]], gradients: Sequence[Any]
                                ) -> Operation[wire.CustomForwardBackwardResult]:  # fmt: skip
        """Backpropagate your own loss ℓ: ``gradients[i]`` is dℓ/d lp for each token of ``samples[i]`` (its
        ``target_tokens``' log-probs; ``rlnb.samples.gradient``), times its weight (w·g; a mask keeps or drops it).
        The gradients accumulate until the next optim-step, as ``forward_backward``'s; the result has no loss nor
        metrics. Checked before anything is sent (``bodies.custom_forward_backward_body``)."""
        body = custom_forward_backward_body(self.backend, samples, gradients)
        return self._submit(Kind.CUSTOM_FORWARD_BACKWARD, body)

    def _forward_backward_built(self, body: wire.ForwardBackwardBody) -> Operation[wire.ForwardBackwardResult]:
        """``forward_backward`` of a body ``forward_backward_body`` built and checked for this session: a split RL
        step (``rlnb.tasks.pieces``) checks every piece before it sends any, and sends each as it was built."""
        return self._submit(Kind.FORWARD_BACKWARD, body, {wire.FORWARD_ONLY: True} if body.forward_only else None)

    def check_params(self, params: OptimizerParams | dict[str, Any] | None = None) -> OptimizerParams:
        """``params`` as this session's optimizer kind takes them, a checked copy (None: the defaults; a dict is
        parsed), or ``TypeError`` for the other kind; a ``ValueError`` naming the field where a local engine's weights
        would refuse them (an AdamW eps that is 0 in their float32: ``check_optim_step``; a remote server refuses
        them as the optim-step operation's INVALID_INPUT, the gradients kept). Check before submitting anything: a
        refused optim-step must not leave a forward-backward's gradients behind to inflate the next step."""
        checked = params_for(self.optimizer, params)
        check = getattr(self.backend, "check_optim_step", None)  # the engine's and FakeBackend's
        if check is not None:
            check(checked.resolved())
        return checked

    def optim_step(self, params: OptimizerParams | dict[str, Any] | None = None) -> Operation[wire.OptimStepResult]:
        """Apply the accumulated gradients with ``params`` (``AdamParams`` or ``MuonParams``, matching
        the session's optimizer; unset fields use the session defaults). Does not publish weights to
        the sampler — call ``weights_sync()`` for that."""
        # A checked copy (params_for): the operation runs later, and params are mutable (``p.learning_rate = ...`` in a
        # loop changed the steps still queued, while the history recorded the rates they were submitted with); params
        # made by pydantic's model_construct were never checked (``rlnb serve`` refused them, this engine stepped).
        body, recorded = self._step_params(params)  # the same params unchanged: checked once (``StepParams``)
        return self._submit(Kind.OPTIM_STEP, body, params=recorded)

    def weights_sync(self, sync_type: str = "synchronous") -> Operation[wire.WeightsSyncResult]:
        """Publish the trainer's current weights to the sampler; returns the new ``weights_version``."""
        return self._submit(Kind.WEIGHTS_SYNC, weights_sync_body(sync_type))

    def sample(
        self,
        prompts: Prompt | Sequence[Prompt],
        num_samples: int = 1,
        max_tokens: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = -1,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        *,
        prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
    ) -> Operation[wire.SampleOutput]:
        """Generate ``num_samples`` completions per prompt from the sampler's weights (the version
        last published by ``weights_sync``).

        ``prompts`` is one prompt or a list of them; a prompt is text, token ids, or chat messages
        (encoded with the session's tokenizer and chat template). ``top_k`` -1 or 0 is off (so is a k past the
        vocabulary). ``stop`` (one non-empty string or a list of them) and the tokenizer's EOS end a sequence; ``seed``
        is any int64. ``temperature``, ``top_p`` and ``top_k`` are always sent, not left to the model's
        ``sampling_defaults``: the policy a loss trains is the untempered model, and on-policy samples come from it.
        Each sequence carries ``.text``, its tokens decoded as a reward reads them (no EOS, no special tokens:
        ``decode(tokens, skip_special=True)``); ``.tokens`` keep the EOS."""
        tokens = [self._encode(p, f"prompts[{i}]") for i, p in enumerate(prompt_list(prompts))]
        asked = SampleSettings(
            num_samples=num_samples, max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
            stop=stop, seed=seed, prompt_logprobs=prompt_logprobs, topk_prompt_logprobs=topk_prompt_logprobs,
        )  # fmt: skip
        body = sample_body(self.backend, self.codec, tokens, asked)
        text = self.codec is not None and not isinstance(self.codec, NoTokenizerCodec)
        mismatch = functools.partial(sample_mismatch, body)
        return self._submit(Kind.SAMPLE, body, transform=self._decoded if text else None, mismatch=mismatch)

    def _decoded(self, out: wire.SampleOutput) -> wire.SampleOutput:
        assert self.codec is not None
        for result in out.results:
            for seq in result.sequences:
                seq.text = self.codec.decode(seq.tokens, skip_special=True)  # an exact match must not see EOS
        return out

    def save_training_checkpoint(self) -> Operation[wire.TrainingCheckpointResult]:
        """Save weights, optimizer state and step, to resume or fork from later."""
        return self._submit(Kind.TRAINING_CHECKPOINT, None)

    def save_inference_checkpoint(self) -> Operation[wire.InferenceCheckpointResult]:
        """Save the current weights for serving or download."""
        return self._submit(Kind.INFERENCE_CHECKPOINT, None)
