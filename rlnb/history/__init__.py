"""What a run recorded: one ``Record`` per operation, your logged figures, on disk as they happen,
and their pandas tables; ``runs()`` / ``compare()`` over many runs."""

from rlnb._files import LockUnsupportedWarning
from rlnb.history.completion_log import completions
from rlnb.history.export import from_json_text
from rlnb.history.history import History, RunContinuedWarning
from rlnb.history.paths import default_runs_dir, new_run_id
from rlnb.history.record import NA_NO_GRAD_NORM, Record

__all__ = [
    "NA_NO_GRAD_NORM",
    "History",
    "LockUnsupportedWarning",
    "Record",
    "RunContinuedWarning",
    "completions",
    "default_runs_dir",
    "from_json_text",
    "new_run_id",
]
