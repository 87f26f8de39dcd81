"""An optim-step that fails: a gradient that is not finite (``step`` raises before changing anything), or an exception
part way through it (out of memory), told apart by whether anything had moved by then."""

from __future__ import annotations

UNCHANGED = (
    "; parameters and optimizer state unchanged, the accumulated gradients dropped (run a forward-backward to train on)"
)
"""What a failed optim-step that had moved nothing says of it (its caller drops the gradients)."""
GRADIENTS_DROPPED = "; the gradients accumulated since the last optim-step were dropped"
"""What a backward that failed part way says: a session's (``rlnb.engine.handlers``) and an ensemble's alike."""


class NonFiniteGradient(Exception):
    """The pre-clip gradient norm is NaN or infinite; ``step`` raised before changing anything."""

    def __init__(self, grad_norm: float, names: list[str], *, unclipped: bool = False) -> None:
        where = ", ".join(names[:5]) + (f", ... ({len(names)} in all)" if len(names) > 5 else "")
        why = ", and grad_clip_norm is 0: nothing clips them" if unclipped else ""
        where = where or f"none (the norm itself overflowed{why})"
        super().__init__(f"gradient norm is {grad_norm}; non-finite gradients in: {where}")
        self.grad_norm = grad_norm
        self.names = names

    def dropped(self) -> str:
        """A NON_FINITE_LOSS optim-step's message, a session's and a batched trial's: the gradients are gone too."""
        return f"{self}{UNCHANGED}"


class StepFailed(Exception):
    """``step`` raised ``cause`` part way (out of memory): ``half`` says whether it had moved some weights or optimizer
    state by then. Its allocations (the norm, Muon's Newton-Schulz) come before any change; AdamW's own step allocates
    its second moment's square root after it has moved its weights, and undoing that would take a copy of them."""

    def __init__(self, cause: Exception, *, half: bool, trial: bool = False) -> None:
        super().__init__(str(cause))
        self.cause, self.half, self.trial = cause, half, trial

    def words(self) -> str:
        """What the failed optim-step left, for its message (the caller drops the gradients). ``trial``: a batched
        trial's, which ends there (no session to restore or train on)."""
        if self.trial:
            if self.half:
                return (
                    "; the optim-step stopped part way: the trial's weights are half-stepped (some moved, others "
                    "not), neither its last step's nor the next's: run the trial again"
                )
            return "; the trial's weights and optimizer state are those of its last completed step"
        if self.half:
            return (
                "; the optim-step stopped part way: some weights and optimizer state are stepped and others not "
                "(half-stepped), the accumulated gradients dropped: restore the session from its last training "
                "checkpoint (weights and optimizer state) before training on; until then this session refuses "
                "optim-steps, weights-syncs and checkpoint saves"
            )
        return UNCHANGED
