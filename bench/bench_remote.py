"""Time rlnb's remote client against ``rlnb serve`` on loopback; print ratios and PASS/FAIL.

(a) Notification delay: from an operation finishing on the server to the client knowing it (its
    ``.result()`` returning), one forward-backward at a time, for several ``--op-delay`` values.
    Three clients take turns, op by op, on one server:
    * rlnb: ``rlnb.connect(url)``, which long-polls rlnb serve (``?wait=S&seen=STATUS``, advertised by the
      server) and polls only the oldest unfinished operation of the session;
    * rlnb adaptive: ``rlnb.connect(url, server_extensions=False)``, the client as against Together:
      adaptive polling (POLL_MIN 0.01 s, POLL_FRACTION 0.1) — what rlnb did before the long-poll;
    * SDK: the official SDK's own helper loop, ``together.post_training._operations.async_wait_for_operation``
      with ``DEFAULT_OPERATION_INTERVAL`` (0.5 s) — the function ``OperationFuture.result()`` and every
      ``SessionClient.trainer.*`` call run — after a low-level ``AsyncTogether`` submission.
    Targets (rlnb): median delay <= 5 ms, at most 2 GETs per operation.

    The server's finish time. The server does not expose timestamps, and its code is not changed: the
    bench starts the very same ``rlnb.cli serve`` through a small probe (``PROBE`` below) that wraps
    ``LocalBackend.submit``'s status listener and appends ``op-id STATUS time.monotonic()`` to a file
    right *after* the server has stored each new envelope — the instant a GET can first see it.
    CLOCK_MONOTONIC is one clock for every process of this machine, so ``known - finished`` is the
    delay. Cross-check without any probe: ops run one at a time, so the server finishes an op no
    earlier than ``submit + op_delay``; ``known - submit - op_delay`` is an upper bound on the delay
    (it also holds the POST and the op's own compute) and is printed too.

    Phase. Both clients poll on a schedule fixed by the submission time, so with identical op
    durations every op finishes at the same point of the schedule and the median is that one point
    (e.g. a 1.0 s op and the SDK's polls at 0, 0.5, 1.0 s: either ~0 or ~0.5 s late, by luck). Real
    durations vary, so by default the probe also stretches each op's simulated compute by a random
    factor U(1, 1 + ``--jitter``) (0.5), spreading finishing times over the poll schedule;
    ``--jitter 0`` gives the fixed-duration figures. The server's code is the same either way.
(b) Pipelining: N steps of forward-backward + optim-step against ``--op-delay 0.05``: every call
    followed by ``.result()`` (wait-each) against submitting everything and waiting at the end
    (pipelined), and a bounded window of W steps in flight. Targets: pipelined >= 1.8x wait-each; GETs
    per operation when pipelined at least 4x fewer than the adaptive poller's (it polled every queued op).
    The server runs one session's ops strictly in order on one worker, so pipelining can only hide
    the client's share (POST, poll latency); the probe's busy time gives the ceiling of the ratio.
    Info rows show what changes it: an SDK-like fixed 0.5 s poll, and an emulated WAN round trip
    (a client transport that sleeps ``--rtt`` per request).

    python bench/bench_remote.py [--delays 0.05,0.2,1.0] [--ops 30] [--ops-long 20] [--jitter 0.5]
                                 [--steps 20] [--reps 3] [--rtt 0.05] [--parts ab] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

import rlnb
from rlnb import samples
from rlnb.remote import poller
from rlnb.testing import ServerProcess, free_port

PROBE = r"""
import random, sys, threading, time
from rlnb.engine import backend as local

_path, _jitter = sys.argv[1], float(sys.argv[2])
del sys.argv[1:3]
_out = open(_path, "a", buffering=1)
_lock = threading.Lock()
_submit = local.LocalBackend.submit


def _probed_submit(self, kind, body, listener):
    def probed(env):
        listener(env)  # the server stores the envelope: from now on a GET sees this status
        t = time.monotonic()
        with _lock:
            _out.write(f"{env.id} {env.status.rsplit('_', 1)[-1]} {t:.6f}\n")

    return _submit(self, kind, body, probed)


local.LocalBackend.submit = _probed_submit

if _jitter:  # each op-delay (the simulated compute, handlers.run's only wait) x U(1, 1 + jitter)
    from rlnb.engine import handlers

    _rng = random.Random(0)
    _run = handlers.run

    def _jittered_run(engine, kind, body, cancelled):
        if engine.op_delay:  # the rest of the delay: handlers.run waits op_delay itself
            cancelled.wait(engine.op_delay * _jitter * _rng.random())
        return _run(engine, kind, body, cancelled)

    handlers.run = _jittered_run
from rlnb.cli import main

sys.exit(main(sys.argv[1:]))
"""
"""``python -c PROBE <file> <jitter> serve ...`` runs ``rlnb.cli serve`` unchanged, with a timestamp per status
change appended to ``<file>`` and, when ``<jitter>`` > 0, op-delays that vary from op to op."""

SEQ = list(b"the quick brown fox jumps over the lazy dog 0123456789")  # 55 bytes, within the tiny model's 64


# ---------------------------------------------------------------------------------------------
# The server: ``rlnb.testing.ServerProcess`` (as tests/conftest.py uses it), optionally through the probe


@contextmanager
def server_process(
    *args: str, probe: str | None = None, jitter: float = 0.0
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``rlnb serve --device cpu *args`` on a free loopback port, through ``PROBE`` when ``probe`` names a
    file (each op-delay x U(1, 1 + ``jitter``)); yields (base URL, the server's process); stops it."""
    port = free_port()
    serve = ["serve", "--port", str(port), "--device", "cpu", *args]
    if probe:
        cmd = [sys.executable, "-c", PROBE, probe, str(jitter), *serve]
    else:
        cmd = [sys.executable, "-m", "rlnb.cli", *serve]
    server = ServerProcess(cmd, f"http://127.0.0.1:{port}")
    with server as url:
        assert server.proc is not None
        yield url, server.proc


@contextmanager
def running_server(*args: str, probe: str | None = None, jitter: float = 0.0) -> Iterator[str]:
    """``server_process``, yielding the base URL only."""
    with server_process(*args, probe=probe, jitter=jitter) as (url, _):
        yield url


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_probe(path: str) -> dict[str, dict[str, float]]:
    """op id -> {PENDING|RUNNING|COMPLETED|FAILED: time.monotonic()} from the probe's file."""
    out: dict[str, dict[str, float]] = collections.defaultdict(dict)
    for line in Path(path).read_text().splitlines():
        op_id, status, t = line.split()
        out[op_id][status] = float(t)
    return out


# ---------------------------------------------------------------------------------------------
# Helpers


class CountingTransport(httpx.BaseTransport):
    """Counts requests by method; sleeps ``rtt`` per request first (an emulated network round trip)."""

    def __init__(self, rtt: float = 0.0):
        self.inner = httpx.HTTPTransport()
        self.rtt = rtt
        self.counts: collections.Counter[str] = collections.Counter()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.counts[request.method] += 1
        if self.rtt:
            time.sleep(self.rtt)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


class AsyncCountingTransport(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.counts: collections.Counter[str] = collections.Counter()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.counts[request.method] += 1
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1), linear interpolation."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def ms(x: float) -> str:
    return f"{x * 1e3:7.1f} ms"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def fb_batch(n: int = 1) -> list[Any]:
    return [samples.cross_entropy(SEQ) for _ in range(n)]


def connect_rlnb(url: str, **options: Any) -> rlnb.Session:
    return rlnb.connect(url, base_model="rlnb/tiny", optimizer="adam", record=False, **options)


class SdkClient:
    """The official SDK: a low-level ``AsyncTogether`` submission, then the SDK helper's own wait loop."""

    def __init__(self, url: str):
        from together import AsyncTogether

        self.loop = asyncio.new_event_loop()
        self.transport = AsyncCountingTransport()
        self.http = httpx.AsyncClient(transport=self.transport, timeout=60)
        self.client = AsyncTogether(api_key="bench", base_url=url, http_client=self.http, max_retries=0)
        pt = self.client.post_training
        mr = self.run(pt.model_resources.create(base_model="rlnb/tiny", lora_enabled=False))
        self.resource_id = mr.id
        self.session_id = self.run(pt.sessions.create(model_resources_id=mr.id)).id
        sample = SEQ
        self.sample = {
            "model_input": {"chunks": [{"encoded_text": {"tokens": sample[:-1]}}]},
            "loss_fn_inputs": {
                "target_tokens": {"data": sample[1:], "dtype": "int64"},
                "weights": {"data": [1.0] * (len(sample) - 1), "dtype": "float32"},
            },
        }

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def forward_backward(self) -> tuple[str, float]:
        """Submit one forward-backward and wait as ``OperationFuture.result()`` does; (op id, known at)."""
        from together.post_training import _operations

        async def go() -> tuple[str, float]:
            op = await self.client.post_training.operations.forward_backward(
                self.session_id,
                loss={"type": "LOSS_TYPE_CROSS_ENTROPY"},
                samples=[self.sample],
                idempotency_key=str(uuid.uuid4()),
            )
            done = await _operations.async_wait_for_operation(
                self.client,
                session_id=self.session_id,
                operation=op,
                timeout=None,
                interval=_operations.DEFAULT_OPERATION_INTERVAL,
            )
            known = time.monotonic()
            if done.status != "TRAINING_OPERATION_STATUS_COMPLETED":
                raise RuntimeError(f"SDK forward-backward {done.id} ended {done.status}")
            return done.id, known

        return self.run(go())

    def get_rtt(self, op_id: str, n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.monotonic()
            self.run(self.client.post_training.operations.retrieve_forward_backward(op_id, session_id=self.session_id))
            out.append(time.monotonic() - t0)
        return out

    def close(self) -> None:
        pt = self.client.post_training
        self.run(pt.sessions.stop(self.session_id))
        self.run(pt.model_resources.stop(self.resource_id, force=True))
        self.run(self.client.close())
        self.run(self.http.aclose())
        self.loop.close()


# ---------------------------------------------------------------------------------------------
# (a) notification delay


CLIENTS = ("rlnb", "adaptive", "sdk")
LABELS = {"rlnb": "rlnb", "adaptive": "rlnb adaptive", "sdk": "SDK"}


def bench_delay(op_delay: float, n_ops: int, warmup: int, jitter: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        probe = str(Path(tmp) / "probe.txt")
        rows: dict[str, list[tuple[str, float, float]]] = {who: [] for who in CLIENTS}  # (op id, submit, known)
        with running_server("--op-delay", str(op_delay), probe=probe, jitter=jitter) as url:
            counting = {"rlnb": CountingTransport(), "adaptive": CountingTransport()}
            sessions = {
                "rlnb": connect_rlnb(url, transport=counting["rlnb"]),
                "adaptive": connect_rlnb(url, transport=counting["adaptive"], server_extensions=False),
            }
            sdk = SdkClient(url)

            def one(who: str) -> tuple[str, float, float]:
                t0 = time.monotonic()
                if who == "sdk":
                    op_id, known = sdk.forward_backward()
                    return op_id, t0, known
                op = sessions[who].forward_backward(fb_batch())
                op.result(timeout=60)
                return op.id, t0, time.monotonic()

            for _ in range(warmup):  # first-call costs: torch, connection pools, pydantic
                for who in CLIENTS:
                    one(who)
            for c in counting.values():
                c.counts.clear()
            sdk.transport.counts.clear()
            for i in range(n_ops):  # take turns, and rotate who goes first, so drifts in load hit all alike
                for who in CLIENTS[i % 3 :] + CLIENTS[: i % 3]:
                    rows[who].append(one(who))
            gets = {who: counting[who].counts["GET"] / n_ops for who in counting}
            gets["sdk"] = sdk.transport.counts["GET"] / n_ops
            last_rlnb, last_sdk = rows["rlnb"][-1][0], rows["sdk"][-1][0]
            client, sid = sessions["rlnb"].backend.client, sessions["rlnb"].backend.session_id
            rtt = {
                "rlnb": statistics.median(_rtt(lambda: client.get_operation(sid, "forward-backward", last_rlnb), 30)),
                "sdk": statistics.median(sdk.get_rtt(last_sdk, 30)),
            }
            for s in sessions.values():
                s.close()
            sdk.close()
        times = read_probe(probe)
    result: dict[str, Any] = {"op_delay": op_delay, "jitter": jitter, "gets": gets, "rtt": rtt}
    for who, series in rows.items():
        delays = [known - times[op_id]["COMPLETED"] for op_id, _, known in series]
        bound = [known - t0 - op_delay for _, t0, known in series]
        run_s = [times[i]["COMPLETED"] - times[i]["RUNNING"] for i, _, _ in series]
        result[who] = {
            "median": statistics.median(delays),
            "p90": pct(delays, 0.9),
            "min": min(delays),
            "max": max(delays),
            "bound": statistics.median(bound),
            "run": statistics.median(run_s),
        }
    return result


def _rtt(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.monotonic()
        fn()
        out.append(time.monotonic() - t0)
    return out


def report_delay(results: list[dict[str, Any]]) -> None:
    jitter = results[0]["jitter"]
    print(
        "(a) notification delay = client knows (result() returns) - server stored COMPLETED (probe), "
        "one forward-backward at a time"
        + (
            f"; each op's op-delay x U(1, {1 + jitter:g}) so that finishing times fall at every poll phase"
            if jitter
            else ""
        )
    )
    print(
        "    op-delay | client        | median     p90        min        max       | upper bound* | GETs/op |"
        " op ran (median)"
    )
    for r in results:
        for who in CLIENTS:
            s = r[who]
            spread = " ".join(ms(s[k]) for k in ("median", "p90", "min", "max"))
            print(
                f"    {r['op_delay']:5.2f} s  | {LABELS[who]:13s} | {spread} | {ms(s['bound'])}   |"
                f" {r['gets'][who]:5.2f}   | {ms(s['run'])}"
            )
        med = {who: r[who]["median"] for who in CLIENTS}
        print(
            f"    {r['op_delay']:5.2f} s  -> rlnb median {med['rlnb'] * 1e3:.2f} ms"
            f" (adaptive {med['adaptive'] * 1e3:.1f} ms, SDK {med['sdk'] * 1e3:.1f} ms:"
            f" adaptive / rlnb {med['adaptive'] / med['rlnb']:.1f}x, SDK / rlnb"
            f" {med['sdk'] / med['rlnb']:.0f}x); GETs/op {r['gets']['rlnb']:.2f} (adaptive {r['gets']['adaptive']:.1f})"
        )
        print(
            f"    {r['op_delay']:5.2f} s  -> targets: median <= 5 ms {verdict(med['rlnb'] <= 0.005)},"
            f" GETs/op <= 2 {verdict(r['gets']['rlnb'] <= 2)}"
        )
    r0 = results[0]
    print(
        f"    floor: one GET of a finished op, median over 30: rlnb client {r0['rtt']['rlnb'] * 1e3:.1f} ms, "
        f"SDK client {r0['rtt']['sdk'] * 1e3:.1f} ms (op-delay {r0['op_delay']:g} s server)"
    )
    print(
        "    * upper bound without the probe: known - submit - op_delay (ops run one at a time, so the server"
        " cannot finish before submit + op_delay); it also holds the POST, the op's compute and any jitter."
    )
    print(
        "    SDK: together.post_training._operations.async_wait_for_operation(interval=DEFAULT_OPERATION_INTERVAL"
        f"={_sdk_interval()} s) after AsyncTogether.post_training.operations.forward_backward (the SDK itself)."
    )


def _sdk_interval() -> float:
    from together.post_training import _operations

    return _operations.DEFAULT_OPERATION_INTERVAL


# ---------------------------------------------------------------------------------------------
# (b) pipelining


def run_steps(session: rlnb.Session, steps: int, window: int | None) -> float:
    """Seconds for ``steps`` forward-backward + optim-step pairs. ``window`` None: ``.result()`` after
    every call; 0: submit everything, then wait; W > 0: at most W steps in flight."""
    batch = fb_batch(4)
    params = rlnb.AdamParams(learning_rate=1e-3)
    start = time.perf_counter()
    inflight: collections.deque[Any] = collections.deque()
    ops: list[Any] = []
    for _ in range(steps):
        fb = session.forward_backward(batch)
        if window is None:
            fb.result(timeout=120)
        opt = session.optim_step(params)
        if window is None:
            opt.result(timeout=120)
        ops += [fb, opt]
        inflight.append(opt)
        while window and len(inflight) > window:
            inflight.popleft().result(timeout=120)
    for op in ops:  # all of them: a failure must not pass for speed
        op.result(timeout=120)
    return time.perf_counter() - start


def bench_pipeline(op_delay: float, steps: int, reps: int, window: int, rtt: float, sdk_steps: int) -> None:
    print(
        f"(b) pipelining: {steps} steps of forward-backward (4 x 54 tokens) + optim-step (Adam) against "
        f"rlnb serve --op-delay {op_delay:g}; median of {reps} runs, modes taking turns"
    )
    modes: dict[str, int | None] = {"wait-each": None, "pipelined": 0, f"window {window}": window}
    with tempfile.TemporaryDirectory() as tmp:
        probe = str(Path(tmp) / "probe.txt")
        with running_server("--op-delay", str(op_delay), probe=probe) as url:
            counting = CountingTransport()
            session = connect_rlnb(url, transport=counting)
            run_steps(session, 3, None)  # warm-up
            times: dict[str, list[float]] = {m: [] for m in modes}
            gets: dict[str, list[float]] = {m: [] for m in modes}
            for _ in range(reps):
                for mode, w in modes.items():
                    counting.counts.clear()
                    times[mode].append(run_steps(session, steps, w))
                    gets[mode].append(counting.counts["GET"] / (2 * steps))
            session.close()

            # the client as against Together (adaptive polling of every operation in flight), for comparison
            adaptive_counting = CountingTransport()
            adaptive = connect_rlnb(url, transport=adaptive_counting, server_extensions=False)
            run_steps(adaptive, 3, None)
            adaptive_gets: dict[str, list[float]] = {"wait-each": [], "pipelined": []}
            adaptive_times: dict[str, list[float]] = {"wait-each": [], "pipelined": []}
            for _ in range(reps):
                for mode, w in (("wait-each", None), ("pipelined", 0)):
                    adaptive_counting.counts.clear()
                    adaptive_times[mode].append(run_steps(adaptive, steps, w))
                    adaptive_gets[mode].append(adaptive_counting.counts["GET"] / (2 * steps))
            adaptive.close()

            # what changes the ratio: a slow-noticing client (the SDK's fixed 0.5 s poll) ...
            slow = connect_rlnb(url, poll_min=0.5, poll_max=0.5, server_extensions=False)
            run_steps(slow, 1, None)
            slow_each = run_steps(slow, sdk_steps, None)
            slow_pipe = run_steps(slow, sdk_steps, 0)
            slow.close()
            # ... and a WAN round trip (every request of this client sleeps `rtt` first)
            wan = connect_rlnb(url, transport=CountingTransport(rtt=rtt))
            run_steps(wan, 1, None)
            wan_each = run_steps(wan, steps, None)
            wan_pipe = run_steps(wan, steps, 0)
            wan.close()
        busy = read_probe(probe)
    run_s = sorted(t["COMPLETED"] - t["RUNNING"] for t in busy.values() if "RUNNING" in t and "COMPLETED" in t)
    per_op = statistics.median(run_s)
    server_floor = 2 * steps * per_op
    med = {m: statistics.median(v) for m, v in times.items()}
    base = med["wait-each"]
    for mode in modes:
        print(
            f"    {mode:11s} {steps / med[mode]:6.2f} steps/s  ({med[mode]:.2f} s; runs "
            + ", ".join(f"{t:.2f}" for t in times[mode])
            + f")  GETs/op {statistics.median(gets[mode]):4.1f}"
            + ("" if mode == "wait-each" else f"   ratio {base / med[mode]:.2f}x")
        )
    best = min(med[m] for m in modes if m != "wait-each")
    ratio = base / best
    print(f"    pipelined / wait-each: {ratio:.2f}x   target >= 1.8x: {verdict(ratio >= 1.8)}")
    for mode in adaptive_gets:
        print(
            f"    adaptive {mode:11s} {steps / statistics.median(adaptive_times[mode]):6.2f} steps/s  GETs/op"
            f" {statistics.median(adaptive_gets[mode]):4.1f}   (the client with server_extensions=False)"
        )
    fewer = statistics.median(adaptive_gets["pipelined"]) / statistics.median(gets["pipelined"])
    print(
        f"    GETs/op pipelined: adaptive {statistics.median(adaptive_gets['pipelined']):.1f} -> oldest-only long-poll"
        f" {statistics.median(gets['pipelined']):.2f}: {fewer:.1f}x fewer   target >= 4x: {verdict(fewer >= 4)}"
    )
    print(
        f"    server: one op runs {per_op * 1e3:.1f} ms (median, RUNNING -> COMPLETED by the probe, op-delay "
        f"included), so {2 * steps} ops need >= {server_floor:.2f} s = {steps / server_floor:.2f} steps/s; "
        f"wait-each spends {(base - server_floor) / (2 * steps) * 1e3:.1f} ms per op on the client side "
        f"-> the ceiling of the ratio here is {base / server_floor:.2f}x"
    )
    print(
        f"    info: SDK-like client (rlnb, poll_min = poll_max = 0.5 s), {sdk_steps} steps: wait-each "
        f"{sdk_steps / slow_each:.2f} steps/s, pipelined {sdk_steps / slow_pipe:.2f} steps/s   "
        f"ratio {slow_each / slow_pipe:.2f}x"
    )
    print(
        f"    info: emulated round trip {rtt * 1e3:.0f} ms per request (client transport sleeps), {steps} steps: "
        f"wait-each {steps / wan_each:.2f} steps/s, pipelined {steps / wan_pipe:.2f} steps/s   "
        f"ratio {wan_each / wan_pipe:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delays", default="0.05,0.2,1.0", help="op-delay values for (a), comma-separated")
    parser.add_argument("--ops", type=int, default=30, help="operations per client and op-delay in (a)")
    parser.add_argument("--ops-long", type=int, default=20, help="the same for op-delays >= 0.5 s")
    parser.add_argument(
        "--jitter", type=float, default=0.5, help="(a): each op's op-delay x U(1, 1 + jitter); 0: fixed durations"
    )
    parser.add_argument("--parts", default="ab", help="which parts to run: a, b or ab")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--pipe-delay", type=float, default=0.05, help="op-delay for (b)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--window", type=int, default=2, help="steps in flight for the bounded-window mode")
    parser.add_argument("--rtt", type=float, default=0.05, help="emulated round trip for the (b) info row")
    parser.add_argument("--sdk-steps", type=int, default=8, help="steps for the SDK-like (0.5 s poll) info row")
    parser.add_argument("--quick", action="store_true", help="a smoke run: few ops, one op-delay")
    args = parser.parse_args()
    if args.quick:
        args.delays, args.ops, args.ops_long, args.steps, args.reps, args.sdk_steps = "0.05", 4, 2, 4, 1, 2
    print("command: python " + " ".join(sys.argv))
    print(
        f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; rlnb POLL_MIN {poller.POLL_MIN} s, "
        f"POLL_FRACTION {poller.POLL_FRACTION}, POLL_MAX {poller.POLL_MAX} s, LONG_POLL_WAIT {poller.LONG_POLL_WAIT} s"
    )
    start = time.perf_counter()
    if "a" in args.parts:
        results = []
        for d in (float(x) for x in args.delays.split(",")):
            results.append(bench_delay(d, args.ops if d < 0.5 else args.ops_long, args.warmup, args.jitter))
        report_delay(results)
    if "b" in args.parts:
        bench_pipeline(args.pipe_delay, args.steps, args.reps, args.window, args.rtt, args.sdk_steps)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
