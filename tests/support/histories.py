"""Histories built by hand for the plot and live view tests: each operation through the backends' path
(``History.new``, then wire envelopes into ``History.update``), no backend run."""

from rlnb import wire
from rlnb.history import History

PENDING, RUNNING = wire.OperationStatus.PENDING, wire.OperationStatus.RUNNING
COMPLETED, FAILED = wire.OperationStatus.COMPLETED, wire.OperationStatus.FAILED
T0 = 1_700_000_000.0


def add(h, kind, *, at, output=None, error=None, status=COMPLETED, step=None, run=0.5):
    """One operation through the backends' path: History.new, then wire envelopes into History.update."""
    rec = h.new(kind, step, None, at=at)
    if status == PENDING:
        return rec
    h.update(rec, wire.Operation(id=f"op-{rec.seq}", status=RUNNING), at + 0.25)
    if status != RUNNING:
        env = wire.Operation(id=f"op-{rec.seq}", status=status, output=output, error=error)
        h.update(rec, env, at + 0.25 + run)
    return rec


def optim_metrics(gn, clip=1.0, lr=1e-3, **extra):
    return {"grad_norm": gn, "grad_clip_norm": clip, "learning_rate": lr, **extra}


def hand_history(losses, norms=None, config=None, metrics=None):
    """A step per loss: forward-backward then optim-step (reporting ``norms``, or only ``step``)."""
    h = History(config=config or {})
    for i, value in enumerate(losses):
        add(
            h, wire.OperationKind.FORWARD_BACKWARD, at=T0 + 2 * i, output=wire.ForwardBackwardResult(loss=value), step=i
        )
        m = None if norms is None else (metrics or optim_metrics)(norms[i])
        add(
            h,
            wire.OperationKind.OPTIM_STEP,
            at=T0 + 2 * i + 1,
            output=wire.OptimStepResult(step=i + 1, metrics=m),
            step=i,
        )
    return h
