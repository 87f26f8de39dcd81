"""``rlnb.connect``: open a session on the in-process engine or on a remote server, and record it."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlnb import wire
from rlnb._input.checks import check_bool
from rlnb.history import History
from rlnb.history.recording import check_recording
from rlnb.history.runconfig import LOCAL
from rlnb.remote.urls import check_base_url
from rlnb.secrets import redaction
from rlnb.session.backend import Backend
from rlnb.session.engine_import import local_backend
from rlnb.session.open_sessions import refuse_shared_history
from rlnb.session.session import Session
from rlnb.sinks.base import Sink
from rlnb.sinks.stream import validate
from rlnb.text.codec import ByteCodec, TokenizerCodec
from rlnb.text.prompts import tokenizer_spec


def connect(
    target: str = LOCAL,
    *,
    optimizer: str | None = None,
    history: History | None = None,
    runs_dir: str | Path | None = None,
    run_id: str | None = None,
    record: bool = True,
    sinks: Sink | Sequence[Sink] = (),
    **options: Any,
) -> Session:
    """Open a training session.

    ``connect("local", optimizer="adam" | "muon", model="tiny" | nn.Module, seed=0, device="auto")``
    runs it in this process on torch; its options are the fields of ``rlnb.engine.options``' four groups, by
    name or as a group (``ModelOptions``, ``MuonOptions``, ``CheckpointOptions``, ``ComputeOptions`` for
    ``threads`` and ``compile``; see ``LocalBackend``).

    ``connect("https://api.together.ai", api_key=..., base_model=..., optimizer=..., lora=...)`` starts
    a session of Together's RL API (or of ``rlnb serve`` at ``http://...``); ``session_id=...``
    attaches to a running one. Its options are the fields of three groups, by name or as a group
    (``session=SessionOptions(...)``, ``client=ClientOptions(...)``, ``poll=PollOptions(...)``; see
    ``rlnb.remote.backend.RemoteBackend.connect``).

    Every operation is recorded under ``<runs_dir>/<run_id>/`` (default ``./rlnb-runs/<new id>``, or
    ``$RLNB_RUNS_DIR``); ``record=False`` keeps the history in memory only. ``sinks=[...]`` streams
    it to TensorBoard, MLflow, W&B or Trackio as well (see ``rlnb.sinks``).

    A Hugging Face folder (``model=`` or ``tokenizer=``) that ships its own Python code (``auto_map``) is
    refused unless ``trust_remote_code=True`` is passed: only for a folder you trust, as that runs its code.
    """
    redaction.hide_option(options)  # first: no traceback's locals show the key
    check_target(target)
    kind = wire.optimizer_kind(optimizer) if optimizer is not None else None
    check_recording(history, runs_dir, run_id, record)  # before a model is loaded or a remote session started
    refuse_shared_history(history)
    recording: dict[str, Any] = {"runs_dir": runs_dir, "run_id": run_id, "record": record, "sinks": validate(sinks)}
    if target == LOCAL:
        backend: Backend = local_backend()(kind or wire.ADAM, **options)
    else:
        from rlnb.remote.backend import RemoteBackend

        tokenizer = options.pop("tokenizer", None)
        trust_remote_code = check_bool("trust_remote_code", options.pop("trust_remote_code", False))
        text_codec = TokenizerCodec(_tokenizer(tokenizer, trust_remote_code)) if tokenizer is not None else None
        backend = RemoteBackend.connect(target, optimizer=kind, **options)
        if text_codec is not None:
            recording["codec"] = text_codec
        elif str(backend.session().base_model).startswith("rlnb/"):
            recording["codec"] = ByteCodec()  # rlnb serve's built-in models are byte-level
    try:
        return Session(backend, history, **recording)
    except BaseException:
        backend.close()
        raise


def check_target(target: Any) -> None:
    """``TypeError`` / ``ValueError`` unless ``target`` is ``"local"`` or an http(s):// URL without user info, query
    or fragment: ``connect`` checks it, and ``sweep`` before its folder is made (each trial FAILED with it)."""
    if not isinstance(target, str):
        raise TypeError(f"target must be 'local' or an http(s):// URL, got {type(target).__name__} {target!r}")
    if target == LOCAL:
        return
    if "://" not in target:  # "locl", "localhost:8000": no URL, so no credentials in one to hide
        raise ValueError(f"unknown target {target!r}: use 'local' or an http(s):// URL")
    check_base_url(target, "the target (the base_url)")  # before anything quotes it: a message, a sweep or run folder


def keywords(target: str) -> frozenset[str]:
    """Every keyword ``connect(target, ...)`` takes: its own, its backend's and the fields of the backend's
    option groups. A caller that passes options on to many sessions (``sweep``) refuses a misspelt one once,
    up front, instead of in every session."""
    if target == LOCAL:
        from rlnb.engine.options import CheckpointOptions, ComputeOptions, ModelOptions, MuonOptions

        backend: Callable[..., Any] = local_backend().__init__
        groups: tuple[type, ...] = (ModelOptions, MuonOptions, CheckpointOptions, ComputeOptions)
        popped: tuple[str, ...] = ()
    else:
        from rlnb.remote.backend import RemoteBackend
        from rlnb.remote.client import ClientOptions
        from rlnb.remote.start import SessionOptions
        from rlnb.remote.waiting import PollOptions

        backend, groups = RemoteBackend.connect, (SessionOptions, ClientOptions, PollOptions)
        popped = ("tokenizer", "trust_remote_code")  # taken by connect itself, above
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names = {p.name for fn in (connect, backend) for p in inspect.signature(fn).parameters.values() if p.kind in named}
    names.update(f.name for group in groups for f in dataclasses.fields(group))
    return frozenset(names.union(popped) - {"target", "self", "base_url"})  # base_url: the remote target


def _tokenizer(tokenizer: Any, trust_remote_code: bool) -> Any:
    """A tokenizer object, or one loaded from a local directory / cached hub id (before a remote session
    is started, so that a tokenizer that cannot be loaded leaves nothing running)."""
    tokenizer = tokenizer_spec(tokenizer)
    if not isinstance(tokenizer, str):
        return tokenizer
    from rlnb.engine.model_setup import load_tokenizer

    return load_tokenizer(tokenizer, trust_remote_code)
