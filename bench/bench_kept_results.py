"""Memory of `rlnb serve` under large sample results: a session keeps its finished operations up to
``max_kept_result_bytes`` of JSON, not only ``max_kept_operations`` of them (a 64 x 8 x 128-token sample, 1.8 MB of
JSON, added ~15 MB of server memory each, for good).

One session on the built-in model runs ``--samples`` samples of ``--prompts`` x ``--num-samples`` x
``--max-tokens`` tokens, each waited for, with ``max_kept_result_bytes`` at ``--kept-mb`` MB (0: unbounded, the old
behaviour). RSS (read from /proc after a gc and glibc's ``malloc_trim``, so that freed memory is not counted) before
and after, the operations still kept and the bytes of the Python objects their records hold (counted: RSS moves by
±15 MB between runs); then the process's CPU time for each of ``--gets`` GETs of the newest result (the server's and
the in-process client's together: an A/B figure, run before and after on one machine). Run it with
``RLNB_MALLOC=default``, once per budget: an engine running on the CPU keeps freed memory in the process
(``rlnb.engine.heap``), and a second run in one process reuses what the first freed.

    RLNB_MALLOC=default .venv/bin/python bench/bench_kept_results.py [--samples 16] [--prompts 64] [--num-samples 8]
        [--max-tokens 128] [--kept-mb 8] [--gets 50]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi.testclient import TestClient  # noqa: E402

from bench.bench_server_memory import running  # noqa: E402
from rlnb import wire  # noqa: E402
from rlnb.server import create_app  # noqa: E402
from rlnb.server.settings import BYTES_MAX  # noqa: E402


def rss_mb() -> float:
    """Resident memory once freed memory went back to the system."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def held(roots: list[object]) -> int:
    """Bytes of the Python objects reachable from ``roots`` (each counted once; classes and modules left out)."""
    seen, todo, total = set(), list(roots), 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, type | ModuleType):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        todo.extend(gc.get_referents(obj))
    return total


def measure(args: argparse.Namespace, budget: int) -> tuple[float, float, int, int, float, int]:
    """RSS before and after the samples, bytes of JSON of one result, how many results are still kept, CPU seconds
    a GET of the newest one, and the bytes of Python objects the kept records hold."""
    prompts = [wire.ModelInput.from_tokens([5 + i % 50, 7]).to_json_dict() for i in range(args.prompts)]
    body = {"model_inputs": prompts, "num_samples": args.num_samples,
            "sampling_params": {"max_tokens": args.max_tokens, "temperature": 1.0}}  # fmt: skip
    with (
        tempfile.TemporaryDirectory() as tmp,
        TestClient(create_app(device="cpu", checkpoint_dir=tmp, max_kept_result_bytes=budget)) as c,
    ):
        c.base_url = c.base_url.join("/v1/rl")
        rid = c.post("/model-resources", json={"base_model": "rlnb/tiny"}).json()["id"]
        sid = running(c, c.post("/training-sessions", json={"model_resources_id": rid}).json()["id"])
        ops, size, before = f"/training-sessions/{sid}/operations/sample", 0, rss_mb()
        for _ in range(args.samples):
            env = c.post(ops, json=body, headers={"Idempotency-Key": str(uuid.uuid4())}).json()
            deadline = time.monotonic() + 600
            while (got := c.get(f"{ops}/{env['id']}", params={"wait": 5}).json())["status"] not in (
                wire.TERMINAL_STATUSES
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sample {env['id']} still {got['status']} after 600 s")
            assert got["status"] == wire.OperationStatus.COMPLETED, got
            size = len(json.dumps(got, separators=(",", ":")))
        record = c.app.state.registry.session(sid)  # type: ignore[attr-defined]
        kept, objects = len(record.finished), held([record.ops[op_id] for op_id in record.finished])
        after = rss_mb()
        cpu = time.process_time()
        for _ in range(args.gets):
            assert c.get(f"{ops}/{env['id']}").status_code == 200
        return before, after, size, kept, (time.process_time() - cpu) / max(args.gets, 1), objects


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--num-samples", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--kept-mb", type=float, default=8)
    parser.add_argument("--gets", type=int, default=50)
    args = parser.parse_args()
    print(f"$ python bench/bench_kept_results.py {' '.join(sys.argv[1:])}")
    name = f"max_kept_result_bytes={args.kept_mb:g} MB" if args.kept_mb else "unbounded (the old behaviour)"
    before, after, size, kept, cpu, objects = measure(args, int(args.kept_mb * 1e6) or BYTES_MAX)
    print(f"{name}: {args.samples} samples of {size / 1e6:.2f} MB of JSON; {kept} kept, holding {objects / 1e6:.1f} "
          f"MB of Python objects; RSS {before:.0f} MB -> {after:.0f} MB (+{after - before:.0f} MB); {cpu * 1e3:.1f} ms "
          "of CPU a GET of one")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
