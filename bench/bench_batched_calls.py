"""Count the Python calls an added member adds to a batched ensemble's step, by where they run (issue 20).

The torch ops an added member adds are counted by ``bench_batched.py --ops``; what else grows with the members is
Python: each member's rewards, advantages, records and history rows. This runs the second step of an ensemble of 1
and of 16 of ``bench_batched.py``'s trials under ``sys.setprofile`` (every Python function call, the profile hook
itself not counted), per step phase, and prints what each added member adds, grouped by the file's place (an
``rlnb`` package or module, or a library: ``statistics``, ``fractions``, ``pydantic``, ...). Counts, not times: the
same on any machine load (a call's cost differs by call; a count only says where a member's Python runs).

    python bench/bench_batched_calls.py [--top 12] [--functions]
"""

from __future__ import annotations

import argparse
import collections
import sys
from collections.abc import Callable

from bench_batched import LEARNING_RATES

import rlnb
from rlnb.batched import Member, run_batched
from rlnb.batched.ensemble import Ensemble

PHASES = ("_sample", "_forward_backward", "_update")


def place(filename: str) -> str:
    """Where a call runs: ``rlnb/<package or module>``, else the library (its top folder under site-packages, or
    the standard library module's name)."""
    if "/rlnb/" in filename:
        rest = filename.split("/rlnb/")[-1]
        return "rlnb/" + rest.split("/")[0]
    if "site-packages/" in filename:
        return filename.split("site-packages/")[-1].split("/")[0]
    return filename.rsplit("/", 1)[-1].removesuffix(".py")


def step_calls(k: int, functions: bool = False) -> dict[str, collections.Counter[str]]:
    """Python calls of each phase of the second step of an ensemble of the first ``k`` trials, by ``place`` (with
    ``functions``: by ``place`` and the function's name)."""
    counts: dict[str, collections.Counter[str]] = {}
    originals = {name: getattr(Ensemble, name) for name in PHASES}

    def counted(name: str) -> Callable[..., object]:
        def run(self: Ensemble, *args: object) -> object:
            if self.records[self.live[0]].step != 1:  # the second step only (its first op is recorded as step 1)
                return originals[name](self, *args)
            calls: collections.Counter[str] = collections.Counter()

            def hook(frame, event, arg):  # type: ignore[no-untyped-def]
                if event == "call":
                    code = frame.f_code
                    calls[place(code.co_filename) + (f" {code.co_name}" if functions else "")] += 1

            sys.setprofile(hook)
            try:
                return originals[name](self, *args)
            finally:
                sys.setprofile(None)
                counts[name] = calls

        return run

    try:
        for name in PHASES:
            setattr(Ensemble, name, counted(name))
        members = [Member(rlnb.AdamParams(learning_rate=lr), seed=0) for lr in LEARNING_RATES[:k]]
        run_batched("tiny", "adam", members, steps=2, device="cpu", threads=1)
    finally:
        for name, fn in originals.items():
            setattr(Ensemble, name, fn)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=12, help="places shown per phase")
    parser.add_argument("--functions", action="store_true", help="count by place and function name")
    args = parser.parse_args()
    print("command: python " + " ".join(sys.argv))
    step_calls(2)  # warm-up: first calls import and cache
    one, many = step_calls(1, args.functions), step_calls(16, args.functions)
    total = sum(sum(many[p].values()) - sum(one[p].values()) for p in PHASES) / 15
    print(f"each added member adds {total:.0f} Python calls a step (second step, 1 vs 16 members)")
    for p in PHASES:
        added = {
            where: (many[p][where] - one[p][where]) / 15
            for where in many[p] | one[p]
            if many[p][where] != one[p][where]
        }
        print(f"  {p.strip('_')}: {sum(one[p].values())} calls at 1 member, {sum(many[p].values())} at 16, "
              f"{sum(added.values()):.0f} a member:")  # fmt: skip
        for where, n in sorted(added.items(), key=lambda x: -abs(x[1]))[: args.top]:
            print(f"    {n:8.1f}  {where}")


if __name__ == "__main__":
    main()
