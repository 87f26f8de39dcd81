"""Compiled decoding (``rlnb.connect(..., compile=True)``): the per-token step as one compiled graph.

On a small model a decode step is a hundred tiny ops, and the time goes to dispatching them, not to the
maths. The step has fixed shapes (the built-in model's static ``KVCache`` step, transformers' ``StaticCache``),
so it compiles: ``torch.compile`` (inductor's fused kernels: C++ on the CPU, Triton on a GPU), one call per
step instead of a thousand dispatches. Not CUDA graphs (``mode="reduce-overhead"``): torch's CUDA graph trees
are kept per thread and the engine runs each session's steps on its own worker thread; on an H200 with torch
2.11 that failed a user's own compiled code on the main thread (``_is_key_in_tls``) and crashed the process at a
later garbage collection once a session's thread had ended (pytorch/pytorch#123177). The token choice (temperature,
top-k / top-p, the log-prob) compiles as well, except a sampling one on a CPU (``choice.compiles``: slower compiled).

Compiling costs seconds to minutes, paid once per process and shape: torch caches each compiled graph per
function and input shapes (and inductor its kernels on disk, so a later process pays less). Cache lengths
are rounded up to a multiple of ``BUCKET`` slots (``bucket``), so that samples of nearby lengths share one
graph; a new batch size, length bucket or thread count (``rlnb.engine.threads``: torch's graphs are per count)
compiles again (up to ``RECOMPILE_LIMIT`` graphs per function). The
step attends over a window of the cache, not all of it (``window``; transformers' ``StaticCache`` through
``hf_window.WindowedCache``): one graph per window a sample reaches, at most ``WINDOWS`` per batch size and length. The
sampling settings a token choice reads as numbers (temperature, top_p) are tensors, so new values do not compile
again (``choice.compiled_pick``). Every compile's time is measured, logged and kept in ``Compiler.compiles`` (the
run's config.json records them); a shape that compiles again (its graph read a value that changed between calls, as
transformers' sliding-window cache's token count did) is kept there too, and said. The compiled step gives the same
tokens as the eager one at a fixed seed and log-probs within ~1e-6 (the kernels sum in another order).

A graph that torch fails to compile (torch 2.11's inductor could not generate the CUDA scan of a 151,936-token
vocabulary's token choice, for one) runs eager from then on, in that process, with a ``RuntimeWarning`` and the
error in ``compiles``: the sample goes on, with the same tokens, and only that graph's speed-up is lost. A compile
that fails once the interpreter's exit has begun (a Ctrl-C mid-compile: torch's exit hooks shut its workers down) is
the exit's doing, not the compiler's: the sample ends as one the stop cancelled, nothing warned or kept in
``compiles``.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from rlnb._input.checks import check_bool
from rlnb.errors import Cancelled, describe
from rlnb.lifecycle import shutdown

log = logging.getLogger("rlnb")

BUCKET = 64
"""Cache lengths of compiled samples are rounded up to a multiple of this many slots."""
WINDOWS = 4
"""Attention windows of a compiled decode step per cache (``window``): the graphs one batch size and length bucket
may compile."""
RECOMPILE_LIMIT = 256
"""Graphs torch may keep per compiled function in a process, where its default is 8: each batch size, length
bucket and attention window of a decode step is one graph (64 batch-and-length shapes of ``WINDOWS`` windows), and
so is each kind of token choice. 256 is also torch's own cap on a function's graphs
(``accumulated_recompile_limit``). Past the limit torch logs a warning and runs the new shape eager. It holds for
every call of a compiled step, not only a shape's first (``_limited``)."""

_LOCK = threading.Lock()
_COMPILED: dict[tuple[Any, ...], Callable[..., Any]] = {}
_SEEN: set[tuple[Any, ...]] = set()
"""Shapes compiled in this process, with torch's thread count (a second session of the same model does not compile
again)."""
_EAGER: set[tuple[Any, ...]] = set()
"""Shapes whose compile failed in this process: they run eager (``Compiler.wrap``)."""
_AGAIN: set[tuple[Any, ...]] = set()
"""Shapes that compiled again in this process, said once each (``Compiler._again``)."""
_THREAD = threading.local()
"""``compiles``: graphs dynamo began to compile on this thread (``_count``): a call that compiled is told by it."""
_LIMIT_ARG = "recompile_limit" in inspect.signature(torch.compile).parameters
"""torch.compile takes the limit for the function it compiles (torch 2.13); before, dynamo's config has it."""


def _count(args: Any) -> None:
    """dynamo's compile-start callback: one more compile on this thread. dynamo calls it for the first of compiles
    under way at once in the process, so a compile that starts while another thread's runs goes uncounted."""
    if args.callback_trigger.name == "DYNAMO":
        _THREAD.compiles = getattr(_THREAD, "compiles", 0) + 1


def _compiles_here() -> int:
    """Compiles begun on this thread so far, ``_count`` registered first. ``torch._dynamo.reset()`` drops it with
    every compiled graph: the shapes compiled so far are then new again (``_SEEN``), not compiled again."""
    handler = torch._dynamo.callback_handler
    if _count not in handler.start_callbacks:
        with _LOCK:
            if _count not in handler.start_callbacks:
                handler.register_start_callback(_count)
                _SEEN.clear()
    return getattr(_THREAD, "compiles", 0)


def _limited() -> contextlib.AbstractContextManager[Any]:
    """``RECOMPILE_LIMIT`` for a call of a compiled step: given to ``torch.compile`` where it takes it, else
    dynamo's config patched around the call (~70 us)."""
    return contextlib.nullcontext() if _LIMIT_ARG else torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT)


def check_compile(compile: object) -> bool:
    return check_bool("compile", compile)


def bucket(length: int, limit: int) -> int:
    """``length`` rounded up to a multiple of ``BUCKET``, but not past ``limit`` (the model's context)."""
    return max(length, min(-(-length // BUCKET) * BUCKET, limit))


def window(filled: int, length: int) -> int:
    """The key slots a compiled decode step attends over once ``filled`` slots of a ``length``-slot cache hold
    tokens: ``filled`` rounded up to a multiple of ``length / WINDOWS`` (itself a multiple of ``BUCKET``), at most
    ``length``. Attending over every slot did 2.51x the eager step's attention work on a 16 x 200 sample of
    ``small`` (``bench/bench_decode_ops.py --compiled``); each window is a fixed shape, so one graph each."""
    size = -(-length // (WINDOWS * BUCKET)) * BUCKET
    return min(-(-filled // size) * size, length)


def _compiled(fn: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
    """One compiled wrapper per function and device kind, for the whole process."""
    key = (fn, device.type)
    limit: dict[str, Any] = {"recompile_limit": RECOMPILE_LIMIT} if _LIMIT_ARG else {}
    with _LOCK:
        if key not in _COMPILED:
            _COMPILED[key] = torch.compile(fn, dynamic=False, **limit)  # no CUDA graphs: see the module's docstring
        return _COMPILED[key]


class Compiler:
    """A session's compiled steps, and the compiles it paid for (``compiles``: what, shape, seconds)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.compiles: list[dict[str, Any]] = []
        self._caches: dict[tuple[Any, ...], Any] = {}

    def cache(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        """The session's KV cache for ``key`` (kind, batch, length), made once and reset for each sample: a
        compiled graph's buffers keep their address (``mark_static``)."""
        if key not in self._caches:
            self._caches[key] = make()
        else:
            reset(self._caches[key])
        return self._caches[key]

    def wrap(self, fn: Callable[..., Any], what: str, arch: Any, **shape: Any) -> Callable[..., Any]:
        """``fn`` compiled; the first call for a new ``arch`` (the model's architecture and dtype: anything
        hashable that tells graphs apart), ``shape`` (sizes, sampling settings: recorded) and torch's thread count
        (its graphs are per count, and the thread policy may change it) in this process is timed, logged and kept in
        ``compiles``, and so is a later call that compiled again (``_again``)."""
        compiled = _compiled(fn, self.device)
        key = (fn, self.device.type, arch, tuple(sorted(shape.items())))

        def call(*args: Any) -> Any:
            if key in _EAGER:
                return fn(*args)
            count, start = _compiles_here(), time.perf_counter()
            try:
                with _limited():
                    out = compiled(*args)
            except torch._dynamo.exc.BackendCompilerFailed as exc:  # inductor's too; raised before the graph ran
                if shutdown.ending():  # torch's exit hooks shut its compile workers down under it: no compiler fault
                    raise Cancelled() from exc
                return self._eager(fn, key, what, shape, exc, time.perf_counter() - start)(*args)
            threads = torch.get_num_threads()  # torch's graphs are per count (a guard): the thread policy's may change
            if (key, threads) in _SEEN:
                if _compiles_here() != count:
                    self._again(key, what, {**shape, "threads": threads}, time.perf_counter() - start)
                return out
            seconds = time.perf_counter() - start
            with _LOCK:
                _SEEN.add((key, threads))
            shape_threads = {**shape, "threads": threads}
            self.compiles.append({"what": what, **shape_threads, "seconds": round(seconds, 2)})
            log.info("rlnb: compiled the %s for %s in %.1f s (once per process)", what, shape_threads, seconds)
            return out

        return call

    def _again(self, key: tuple[Any, ...], what: str, shape: dict[str, Any], seconds: float) -> None:
        """A shape compiled before compiled again: its graph read a value (a Python number) that changed since.
        Kept in ``compiles`` (``again``) and logged each time, said once per shape: every such compile costs its
        seconds, and past ``RECOMPILE_LIMIT`` graphs torch runs the step eager."""
        self.compiles.append({"what": what, **shape, "seconds": round(seconds, 2), "again": True})
        log.info("rlnb: compiled the %s for %s again in %.1f s", what, shape, seconds)
        with _LOCK:
            first = key not in _AGAIN
            _AGAIN.add(key)
        if first:
            warnings.warn(
                f"rlnb: the {what} for {shape} compiled again ({seconds:.1f} s): its graph depends on a value that "
                f"changed since its first call, so it may compile at each call (each kept in compiles; past "
                f"{RECOMPILE_LIMIT} graphs torch runs it eager)",
                RuntimeWarning,
                stacklevel=3,
            )

    def _eager(
        self,
        fn: Callable[..., Any],
        key: tuple[Any, ...],
        what: str,
        shape: dict[str, Any],
        exc: Exception,
        seconds: float,
    ) -> Callable[..., Any]:
        """``fn`` itself, from now on for ``key``, after its compile failed: said, recorded, and not tried again."""
        inner = getattr(exc, "inner_exception", None)  # what the backend raised, under dynamo's wrapper
        error = (f"{type(exc).__name__}: {describe(inner)}" if inner is not None else describe(exc)).splitlines()[0]
        with _LOCK:
            _EAGER.add(key)
        self.compiles.append({"what": what, **shape, "seconds": round(seconds, 2), "error": error})
        warnings.warn(
            f"rlnb: compiling the {what} for {shape} failed ({error}); it runs eager in this process "
            "(the same tokens, without that speed-up)",
            RuntimeWarning,
            stacklevel=2,
        )
        return fn


def reset(cache: Any) -> None:
    """An emptied cache: zeros everywhere (a stale NaN times a masked-out zero weight would still be NaN)."""
    if hasattr(cache, "reset"):  # transformers' StaticCache
        cache.reset()
        return
    for t in [*cache.k, *cache.v]:
        t.zero_()
    cache.real.fill_(True)
    cache.length = 0


def mark_static(tensors: list[Tensor]) -> None:
    """Tell the compiler that these buffers (a KV cache) keep their address: the session reuses one cache per
    shape (``Compiler.cache``), so the compiled step may take them as fixed buffers, as it takes the weights."""
    for t in tensors:
        torch._dynamo.mark_static_address(t)
