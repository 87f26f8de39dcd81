"""rlnb: drive RL / fine-tuning training sessions from a notebook.

One API for a remote Together training session and an in-process torch backend:

    import rlnb
    session = rlnb.connect("local", optimizer="muon")
    op = session.forward_backward([rlnb.samples.cross_entropy(tokens)])
    session.optim_step(rlnb.MuonParams(learning_rate=0.02))
    op.result().loss
    session.history.df
"""

from importlib import import_module as _import_module

from rlnb import samples, sinks, wire
from rlnb._secrets import RedactingFilter, configure_logging
from rlnb.errors import (
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InternalServerError,
    InvalidParams,
    NotFoundError,
    OperationFailed,
    OperationTimeout,
    PermissionDeniedError,
    RateLimitError,
    RlnbError,
    RunLocked,
    SessionClosed,
    UnprocessableEntityError,
)
from rlnb.history import History, Record
from rlnb.history.catalog import compare, runs
from rlnb.params import AdamParams, MuonParams
from rlnb.session import Session, connect
from rlnb.session.operation import Operation
from rlnb.sinks.exporting import export

__version__ = "0.1.0"

# Reached as attributes (``rlnb.viz.plots.overview``) but imported on first use: they pull in matplotlib,
# ipywidgets, transformers or FastAPI, which ``import rlnb`` should not pay for.
_LAZY_SUBPACKAGES = frozenset(
    {"batched", "cli", "engine", "history", "remote", "server", "session", "sweep", "tasks", "viz", "widgets"}
)


def __getattr__(name: str) -> object:
    if name in _LAZY_SUBPACKAGES:
        return _import_module(f"rlnb.{name}")
    raise AttributeError(f"module 'rlnb' has no attribute {name!r}")


__all__ = [
    "APIConnectionError",
    "APIError",
    "APIStatusError",
    "APITimeoutError",
    "AdamParams",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "History",
    "InternalServerError",
    "InvalidParams",
    "MuonParams",
    "NotFoundError",
    "Operation",
    "OperationFailed",
    "OperationTimeout",
    "PermissionDeniedError",
    "RateLimitError",
    "Record",
    "RedactingFilter",
    "RlnbError",
    "RunLocked",
    "Session",
    "SessionClosed",
    "UnprocessableEntityError",
    "compare",
    "configure_logging",
    "connect",
    "export",
    "runs",
    "samples",
    "sinks",
    "wire",
]

for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type):
        _obj.__module__ = "rlnb"
del _name, _obj
