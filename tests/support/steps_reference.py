"""A second, independent build of the steps table: pandas group-bys over an operations table.

``History.steps`` (``rlnb.history.steplog.StepLog``) keeps the table up to date as operations finish;
tests compare it against this build from the whole ``History.df``, which shares none of its code.
"""

from __future__ import annotations

import pandas as pd

from rlnb import wire


def steps_table(ops: pd.DataFrame, logged: pd.DataFrame | None = None) -> pd.DataFrame:
    """``History.steps`` built from ``History.df`` and ``History.logged`` with pandas."""
    done = ops[ops.status == wire.OperationStatus.COMPLETED]
    opt = done[done.kind == wire.OperationKind.OPTIM_STEP]
    cols = ["step", "grad_norm", "grad_norm_muon", "grad_norm_adam", "grad_clip_norm", "learning_rate", "finished_at"]
    table = opt[cols].copy()
    table["step"] = table["step"].astype("int64")
    fb = done[done.kind == wire.OperationKind.FORWARD_BACKWARD]
    loss = fb.groupby(fb["step"].astype("int64") + 1)["loss"].sum(min_count=1)
    table["loss"] = table["step"].map(loss)
    finished = table["finished_at"]
    table["step_time_s"] = finished.diff().dt.total_seconds()
    sync = done[done.kind == wire.OperationKind.WEIGHTS_SYNC]
    table["weights_version"] = (
        table["step"]
        .map(sync.dropna(subset=["weights_version"]).groupby("weights_version")["weights_version"].first())
        .astype("Int64")
    )
    table = table.drop(columns="finished_at").reset_index(drop=True)
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
        "weights_version",
    ]
    return table[order + [c for c in table.columns if c not in order]]
