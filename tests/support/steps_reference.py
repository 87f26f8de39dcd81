"""A second, independent build of the steps table: pandas group-bys over an operations table.

``History.steps`` (``rlnb.history.steplog.StepLog``) keeps the table up to date as operations finish;
tests compare it against this build from the whole ``History.df``, which shares none of its bookkeeping
(only the rule for one step's times, ``rlnb.history.timing``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlnb import wire
from rlnb.history.record import TIMES
from rlnb.history.steplog import KEPT_GRADIENTS
from rlnb.history.timing import Times, op_times, step_times


def steps_table(ops: pd.DataFrame, logged: pd.DataFrame | None = None) -> pd.DataFrame:
    """``History.steps`` built from ``History.df`` and ``History.logged`` with pandas."""
    kept = (ops.status == wire.OperationStatus.FAILED) & ops.error_code.isin(list(KEPT_GRADIENTS))
    is_opt = ((ops.kind == wire.OperationKind.OPTIM_STEP) & ~kept).to_numpy(dtype=np.int64)
    # optim-steps submitted before each, but one that failed keeping the gradients: the next one applies them
    segment = pd.Series(np.cumsum(is_opt) - is_opt, index=ops.index)
    done = ops[ops.status == wire.OperationStatus.COMPLETED]
    opt = done[done.kind == wire.OperationKind.OPTIM_STEP]
    cols = ["step", "grad_norm", "grad_norm_muon", "grad_norm_adam", "grad_clip_norm", "learning_rate"]
    table = opt[cols].copy()
    table["step"] = table["step"].astype("int64")
    fb = done[done.kind == wire.OperationKind.FORWARD_BACKWARD]
    fb = fb.loc[fb.params.map(lambda p: not p.get("forward_only")).astype(bool)]  # an evaluation: not in the loss
    loss = fb.groupby(segment[fb.index])["loss"].sum(min_count=1)  # since the optim-step before, a failed one too
    table["loss"] = segment[opt.index].map(loss).to_numpy()
    ended = ops[ops.status.isin(list(wire.TERMINAL_STATUSES))]
    epoch = pd.Timestamp(0, tz="UTC")
    seconds = {c: (ended[c] - epoch).dt.total_seconds().to_numpy() for c in TIMES}
    spans: dict[int, list[Times]] = {}
    for seg, kind, sub, start, end in zip(segment[ended.index], ended.kind, *seconds.values(), strict=True):
        spans.setdefault(int(seg), []).append(op_times(kind, sub, start, end))
    step = np.array([step_times(spans.get(int(seg), ())) for seg in segment[opt.index]], dtype=float)
    table["step_time_s"] = step[:, 0] if len(step) else np.empty(0)
    table["queue_s"] = step[:, 1] if len(step) else np.empty(0)
    sync = done[done.kind == wire.OperationKind.WEIGHTS_SYNC]
    table["weights_version"] = (
        table["step"]
        .map(sync.dropna(subset=["weights_version"]).groupby("weights_version")["weights_version"].first())
        .astype("Int64")
    )
    table = table.reset_index(drop=True)
    if logged is not None and len(logged) and "step" in logged:
        user = logged.groupby("step").last()
        table = table.join(user, on="step")
    order = [
        "step",
        "loss",
        "grad_norm",
        "grad_norm_muon",
        "grad_norm_adam",
        "grad_clip_norm",
        "learning_rate",
        "step_time_s",
        "queue_s",
        "weights_version",
    ]
    return table[order + [c for c in table.columns if c not in order]]
