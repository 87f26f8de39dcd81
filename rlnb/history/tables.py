"""The pandas tables of a history: ``History.df`` built from records (incrementally: ``_concat`` appends
the rows of newly finished operations to a cached frame) and the steps table of an operations table.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from rlnb import wire
from rlnb.history.record import CATEGORIES, COLUMNS, FLOATS, TIMES, Record
from rlnb.history.timing import Times, op_times, step_times


def _columns(records: list[Record]) -> dict[str, list[Any]]:
    return {name: [getattr(r, name) for r in records] for name in COLUMNS}


def _ops_frame(columns: dict[str, list[Any]]) -> pd.DataFrame:
    """``History.df`` rows from column lists."""
    n = len(columns["seq"])
    frame = pd.DataFrame(
        {
            **columns,
            **{c: pd.Categorical(np.array(columns[c], dtype=object)) for c in CATEGORIES},
            **{c: np.fromiter(columns[c], float, n) for c in FLOATS},
            **{c: pd.array(columns[c], dtype="Int64") for c in ("seq", "step", "weights_version")},
        },
        columns=list(COLUMNS),
    )
    times = {c: np.fromiter(columns[c], float, n) for c in ("submitted_at", "started_at", "finished_at")}
    frame["queue_s"] = times["started_at"] - times["submitted_at"]
    frame["run_s"] = times["finished_at"] - times["started_at"]
    for col, values in times.items():
        frame[col] = pd.to_datetime(values, unit="s", utc=True)
    return frame


def _concat(head: pd.DataFrame | None, tail: pd.DataFrame) -> pd.DataFrame:
    """``head`` then ``tail`` as one frame, categories merged as a fresh build would make them."""
    if head is None or not len(head):
        return tail
    if not len(tail):
        return head.copy(deep=False)  # callers may assign columns; the cache stays as it is
    frame = pd.concat([head, tail], ignore_index=True)
    for col in CATEGORIES:
        a, b = head[col].array, tail[col].array
        if not len(a.categories):  # all missing: its categories' dtype is a placeholder
            a = a.set_categories(b.categories)
        elif not len(b.categories):
            b = b.set_categories(a.categories)
        frame[col] = union_categoricals([a, b], sort_categories=True)
    for col in ("op_id", "error_message", "na_reason"):  # text: str dtype once any value is a string
        text = [d for d in (head[col].dtype, tail[col].dtype) if isinstance(d, pd.StringDtype)]
        if text and frame[col].dtype != text[0]:
            frame[col] = frame[col].astype(text[0])
    return frame


def steps_table(ops: pd.DataFrame, logged: pd.DataFrame | None = None) -> pd.DataFrame:
    """``History.steps`` from an operations table (also used for loaded and compared runs)."""
    is_opt = (ops.kind == wire.OperationKind.OPTIM_STEP).to_numpy(dtype=np.int64)
    segment = pd.Series(np.cumsum(is_opt) - is_opt, index=ops.index)  # optim-steps submitted before each
    done = ops[ops.status == wire.OperationStatus.COMPLETED]
    opt = done[done.kind == wire.OperationKind.OPTIM_STEP]
    cols = ["step", "grad_norm", "grad_norm_muon", "grad_norm_adam", "grad_clip_norm", "learning_rate"]
    table = opt[cols].copy()
    table["step"] = table["step"].astype("int64")
    fb = done[done.kind == wire.OperationKind.FORWARD_BACKWARD]
    loss = fb.groupby(fb["step"].astype("int64") + 1)["loss"].sum(min_count=1)
    table["loss"] = table["step"].map(loss)
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
