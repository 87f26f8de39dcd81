"""rlnb: drive RL / fine-tuning training sessions from a notebook.

One API for a remote Together training session and an in-process torch backend:

    import rlnb
    session = rlnb.connect("local", optimizer="muon")
    op = session.forward_backward([rlnb.samples.cross_entropy(tokens)])
    session.optim_step(rlnb.MuonParams(learning_rate=0.02))
    op.result().loss
    session.history.df
"""

import sys as _sys
from importlib import import_module as _import_module

# True for the type checker only (any name TYPE_CHECKING is, to it); deleted below. ``typing.TYPE_CHECKING`` was the
# one library the console script imported before ``rlnb.cli.main`` holds a Ctrl-C: a traceback in its first ~2 ms.
TYPE_CHECKING = False
if TYPE_CHECKING:  # for the type checker and the API reference: at run time each name is imported on first use
    from rlnb import samples, sinks, wire
    from rlnb.errors import (
        APIConnectionError,
        APIError,
        APIStatusError,
        APITimeoutError,
        AuthenticationError,
        BadRequestError,
        CleartextKeyWarning,
        ConflictError,
        InternalServerError,
        InvalidParams,
        NotFoundError,
        OperationFailed,
        OperationTimeout,
        PermissionDeniedError,
        RateLimitError,
        ResourceEnded,
        RlnbError,
        RunLocked,
        SessionBusy,
        SessionClosed,
        UnprocessableEntityError,
    )
    from rlnb.history import History, Record
    from rlnb.history.catalog import compare, runs
    from rlnb.params import AdamParams, MuonParams
    from rlnb.secrets.redaction import RedactingFilter, configure_logging
    from rlnb.session import Session
    from rlnb.session.connect import connect
    from rlnb.session.operation import Operation
    from rlnb.sinks.exporting import export
del TYPE_CHECKING  # not a name of rlnb's

__version__ = "0.1.0"

_SUBMODULES = frozenset(
    {"batched", "cli", "engine", "errors", "history", "lifecycle", "params", "remote", "samples", "secrets", "server",
     "session", "sinks", "sweep", "tasks", "testing", "text", "viz", "widgets", "wire"}
)  # fmt: skip
"""Reached as attributes after a bare ``import rlnb`` (``rlnb.viz.plots.overview``, ``rlnb.errors.OperationFailed``),
imported on first use: some pull in torch, matplotlib, ipywidgets, transformers or FastAPI."""

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIStatusError",
    "APITimeoutError",
    "AdamParams",
    "AuthenticationError",
    "BadRequestError",
    "CleartextKeyWarning",
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
    "ResourceEnded",
    "RlnbError",
    "RunLocked",
    "Session",
    "SessionBusy",
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
"""A literal list: the type checker and the API reference (griffe) read it without running this module."""

_MODULES = {
    **dict.fromkeys(["RedactingFilter", "configure_logging"], "rlnb.secrets.redaction"),
    **dict.fromkeys(["History", "Record"], "rlnb.history"),
    **dict.fromkeys(["compare", "runs"], "rlnb.history.catalog"),
    **dict.fromkeys(["AdamParams", "MuonParams"], "rlnb.params"),
    "Session": "rlnb.session",
    "connect": "rlnb.session.connect",
    "Operation": "rlnb.session.operation",
    "export": "rlnb.sinks.exporting",
}
"""The module of each public name that is no error class; every other one of ``__all__`` that is no submodule is an
exception of ``rlnb.errors`` (named once, in ``__all__``: a second list would be kept in step by a test only)."""

_PUBLIC: dict[str, str] = {name: _MODULES.get(name, "rlnb.errors") for name in __all__ if name not in _SUBMODULES}
"""Each public name of ``__all__`` that is no module → the module it is imported from, on first use: importing them
all would import pandas, pydantic and numpy at once (0.6-2.5 s), so ``rlnb --help`` would take seconds and a Ctrl-C
in them print a traceback."""


def __getattr__(name: str) -> object:
    if name in _SUBMODULES:
        return _import_module(f"rlnb.{name}")
    if name not in _PUBLIC:
        raise AttributeError(f"module 'rlnb' has no attribute {name!r}")
    obj = getattr(_import_module(_PUBLIC[name]), name)
    globals()[name] = obj  # resolved once: later reads are plain attribute reads
    _publish()
    return obj


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBMODULES})


def _publish() -> None:
    """Show every public class as ``rlnb.X`` (in tracebacks, reprs, ``help``), as ``import rlnb`` did when it
    imported them all: those of the modules loaded so far (the module that raises an error was loaded with it)."""
    for name, module in _PUBLIC.items():
        obj = getattr(_sys.modules.get(module), name, None)
        if isinstance(obj, type):
            obj.__module__ = "rlnb"
