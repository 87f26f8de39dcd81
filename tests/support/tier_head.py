"""The fast tier's CPU head: ``python -m tests.support.tier_head [--runs 2] [--top 40] [pytest args]`` runs the
tier as plain ``pytest`` does (its workers, each pinned to one core, so that the engine runs on the threads it
runs on there) ``--runs`` times, counting each test's CPU in its worker (``time.process_time``: setup, call and
teardown, every thread of the process) less the garbage collector's passes that fall in it, and prints the
share the head takes and the tests over ``cpu_heavy.BOUND_S`` in every run: what the tier's rule
(docs/testing.md, "Two tiers") would move to the slow tier next, each once a fast test keeps its idea."""

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.cpu_heavy import BOUND_S

OUT = "RLNB_TIER_HEAD_OUT"


class Recorder:
    """A pytest plugin: each test's CPU seconds, less the collector's time inside it, written at the session's end."""

    def __init__(self, out: str) -> None:
        self.out, self.cpu, self.gc_s, self._gc_start = out, {}, 0.0, 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.process_time()
        else:
            self.gc_s += time.process_time() - self._gc_start

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        start, in_gc = time.process_time(), self.gc_s
        yield
        self.cpu[item.nodeid] = time.process_time() - start - (self.gc_s - in_gc)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(f"{self.out}.{worker}.json").write_text(json.dumps(self.cpu))


def pytest_configure(config: pytest.Config) -> None:
    """Loaded with ``-p tests.support.tier_head``: each process records in ``$RLNB_TIER_HEAD_OUT.<worker>.json``."""
    if os.environ.get(OUT):
        config.pluginmanager.register(Recorder(os.environ[OUT]), "tier_head_recorder")


def head(runs: list[dict[str, float]], top: int) -> list[str]:
    """The lines to print: each test's least CPU over the runs, the head's share, and the tests over the bound."""
    least = {k: min(run.get(k, 0.0) for run in runs) for k in runs[0]}
    ranked = sorted(least.items(), key=lambda kv: -kv[1])
    total = sum(least.values())
    lines = [f"{len(ranked)} tests, {total:.1f} s of CPU (least of {len(runs)} run(s) each)"]
    for share in (0.01, 0.05, 0.10):
        count = max(1, int(len(ranked) * share))
        lines.append(f"top {share:.0%} ({count} tests): {sum(c for _, c in ranked[:count]):.1f} s")
    over = [(k, c) for k, c in ranked if c > BOUND_S]
    lines.append(f"over {BOUND_S} s in every run: {len(over)} tests, {sum(c for _, c in over):.1f} s")
    lines += [f"{c:6.3f}  {k}" for k, c in ranked[:top]]
    return lines


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of the tier; a test's CPU is its least")
    parser.add_argument("--top", type=int, default=40, help="how many of the costliest tests to list")
    args, rest = parser.parse_known_args(argv)
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        for i in range(args.runs):
            out = os.path.join(folder, f"run{i}")
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "tests.support.tier_head", *rest]
            subprocess.run(cmd, env={**os.environ, OUT: out}, check=False, timeout=3600)
            runs.append(
                {k: v for part in Path(folder).glob(f"run{i}.*.json") for k, v in json.loads(part.read_text()).items()}
            )
    print("\n".join(head(runs, args.top)))


if __name__ == "__main__":
    main(sys.argv[1:])
