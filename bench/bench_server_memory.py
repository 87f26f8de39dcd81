"""Memory of `rlnb serve` (a) over many session create / train / stop cycles (the bound is +100 MB over 200
cycles: a stopped session must let its model, optimizer and worker go), and (b) under payload uploads (the
per-session and total caps bound what is held, and a stopped session's uploads are let go).

(a) Each cycle creates a full-weight resource and a session on the built-in model, runs a forward-backward
and an optim-step (so the optimizer has state), and stops the resource (which stops the session). The
same cycles are run twice: as the server does it (a stopped session lets its backend go), then with every
backend kept alive by a reference — what the server did before.

(b) One session is sent ``--uploads`` uploads of ``--upload-mb`` MB each (the server's default caps:
1 GiB per session, 4 GiB in total); RSS with what was accepted held, then after the session stops.

The server runs in process (FastAPI TestClient); RSS is read from /proc after a gc.

    .venv/bin/python bench/bench_server_memory.py [--part a|b] [--cycles 200] [--model rlnb/tiny]
        [--uploads 28] [--upload-mb 200]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi.testclient import TestClient  # noqa: E402

from rlnb import samples, wire  # noqa: E402
from rlnb.server import create_app  # noqa: E402

TARGET_MB = 100.0
CE = wire.ForwardBackwardBody(
    samples=[samples.cross_entropy(list(b"memory is bounded"))], loss=wire.LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
).to_json_dict()


def rss_mb() -> float:
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def cycles(c: TestClient, n: int, model: str, keep: list | None) -> None:
    registry = c.app.state.registry  # type: ignore[attr-defined]
    for _ in range(n):
        rid = c.post("/model-resources", json={"base_model": model}).json()["id"]
        sid = running(c, c.post("/training-sessions", json={"model_resources_id": rid}).json()["id"])
        ops = f"/training-sessions/{sid}/operations"
        c.post(f"{ops}/forward-backward", json=CE, headers={"Idempotency-Key": str(uuid.uuid4())})
        step = c.post(f"{ops}/optim-step", json={}, headers={"Idempotency-Key": str(uuid.uuid4())}).json()
        while c.get(f"{ops}/optim-step/{step['id']}").json()["status"] not in wire.TERMINAL_STATUSES:
            time.sleep(0.002)
        if keep is not None:
            keep.append(registry.session(sid).backend)
        c.post(f"/model-resources/{rid}/stop", params={"force": "true"})


def running(c: Any, sid: str) -> str:
    """``sid`` once its model is built (a create answers CREATING and builds on a thread), within a minute."""
    deadline = time.monotonic() + 60
    while c.get(f"/training-sessions/{sid}").json()["status"] == wire.SessionStatus.CREATING:
        if time.monotonic() > deadline:
            raise RuntimeError(f"session {sid} still CREATING after 60 s")
        time.sleep(0.01)
    return sid


def measure(n: int, model: str, keep_backends: bool) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp, TestClient(create_app(device="cpu", checkpoint_dir=tmp)) as c:
        c.base_url = c.base_url.join("/v1/rl")
        registry = c.app.state.registry  # type: ignore[attr-defined]
        kept: list | None = [] if keep_backends else None
        cycles(c, 10, model, kept)  # warm up: first-use allocations, caches
        registry.settle(60)
        before, start = rss_mb(), time.perf_counter()
        cycles(c, n, model, kept)
        registry.settle(60)  # stopped sessions' backends are closed on threads of their own
        return before, rss_mb(), time.perf_counter() - start


def uploads(n: int, mb: int) -> int:
    """Part (b): ``n`` uploads of ``mb`` MB to one session; prints what was kept and RSS; 0 if bounded."""
    body = b'{"samples": []}' + b" " * (mb * 10**6 - 15)
    with tempfile.TemporaryDirectory() as tmp, TestClient(create_app(device="cpu", checkpoint_dir=tmp)) as c:
        c.base_url = c.base_url.join("/v1/rl")
        registry = c.app.state.registry  # type: ignore[attr-defined]
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
        sid = running(c, c.post("/training-sessions", json={"model_resources_id": rid}).json()["id"])
        before = rss_mb()
        codes: dict[int, int] = {}
        for _ in range(n):
            url = c.post(f"/training-sessions/{sid}/payloads/upload-url").json()["upload_url"]
            code = c.put(url, content=body).status_code
            codes[code] = codes.get(code, 0) + 1
        held, peak = registry.payloads.held(sid), rss_mb()
        c.post(f"/training-sessions/{sid}/stop")
        late = c.post(f"/training-sessions/{sid}/payloads/upload-url").status_code
        registry.settle(60)
        after = rss_mb()
    cap = registry.settings.max_session_payload_bytes
    print(f"offered {n} x {mb} MB = {n * mb / 1000:.1f} GB to one session; answers {dict(sorted(codes.items()))}")
    print(f"held {held / 1e6:.0f} MB (cap max_session_payload_bytes = {cap / 1e6:.0f} MB); RSS {before:.0f} MB -> "
          f"{peak:.0f} MB (+{peak - before:.0f} MB) with the uploads held")  # fmt: skip
    print(f"after the session stops: RSS {after:.0f} MB (+{after - before:.0f} MB over the start); upload-url on the "
          f"stopped session: {late}")  # fmt: skip
    bounded = held <= cap and peak - before <= cap / 2**20 + 100 and after - before <= 100 and late == 409
    print(f"bounded by the cap and freed at stop (+{TARGET_MB:.0f} MB slack): {'PASS' if bounded else 'FAIL'}")
    return 0 if bounded else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["a", "b", "ab"], default="ab")
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--model", default="rlnb/tiny")
    parser.add_argument("--uploads", type=int, default=28)
    parser.add_argument("--upload-mb", type=int, default=200)
    args = parser.parse_args()
    print(f"$ python bench/bench_server_memory.py {' '.join(sys.argv[1:])}")
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}")
    failed = uploads(args.uploads, args.upload_mb) if "b" in args.part else 0
    if "a" not in args.part:
        return failed
    before, after, took = measure(args.cycles, args.model, keep_backends=False)
    grown = after - before
    print(f"freed backends : RSS {before:.0f} MB -> {after:.0f} MB, +{grown:.1f} MB over {args.cycles} cycles "
          f"({took:.1f} s)")  # fmt: skip
    kb, ka, kt = measure(args.cycles, args.model, keep_backends=True)
    print(f"kept backends  : RSS {kb:.0f} MB -> {ka:.0f} MB, +{ka - kb:.1f} MB (the old behaviour; {kt:.1f} s)")
    ratio = (ka - kb) / max(grown, 1.0)
    print(f"growth: {grown:.1f} MB vs {ka - kb:.1f} MB kept ({ratio:.0f}x less); target <= +{TARGET_MB:.0f} MB: "
          f"{'PASS' if grown <= TARGET_MB else 'FAIL'}")  # fmt: skip
    return failed or (0 if grown <= TARGET_MB else 1)


if __name__ == "__main__":
    sys.exit(main())
