"""A sample's prefill, each prompt once against every row (each prompt ``num_samples`` times, as before sample39).

Counts work, not seconds (a shared machine): the rows each prefill runs, the elements its ops write (``OpCounter``),
and the peak resident memory a fresh process grows by over the decoder's prefill (``ru_maxrss``), against what the
engine's memory check counts for that sample (``sampling.check_cache``: the KV cache and the prefill). The old
prefill is the same decoder given every prompt repeated ``n`` times, one sample each.

    .venv/bin/python bench/bench_prefill.py [--sizes tiny,small] [--prompts 8] [--tokens 200] [--samples 16]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's rlnb, not the installed one

from rlnb.engine.models.factory import build_adapter  # noqa: E402
from rlnb.testing.ops import OpCounter  # noqa: E402

CPU = torch.device("cpu")


def child(size: str, prompts: int, tokens: int, n: int, once: bool, count: bool) -> dict[str, int]:
    """One prefill in this process: its rows, elements written (``count``) or peak RSS growth in bytes."""
    torch.set_num_threads(1)
    adapter = build_adapter(size, seed=0, device=CPU)
    model = adapter.module.eval()
    decoder = adapter.decoder(model, prompts * n, tokens + 1)
    ids = torch.randint(1, 256, (prompts, tokens), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    if not once:
        ids, mask = ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)
    rows: list[int] = []
    model.blocks[0].register_forward_pre_hook(lambda m, args: rows.append(args[0].shape[0]))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with torch.no_grad(), OpCounter(elements=True) if count else torch.no_grad() as counter:
        decoder.prefill(ids, mask, n if once else 1)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    out = {"rows": rows[0], "grown": grown}
    if count:
        out["written"] = sum(counter.written.values())
    out["counted"] = rows[0] * tokens * adapter.prefill_bytes_per_token(tokens, True, False)  # the check's share
    return out


def run(size: str, prompts: int, tokens: int, n: int, once: bool, count: bool) -> dict[str, int]:
    args = [sys.executable, __file__, "--child", size, str(prompts), str(tokens), str(n), str(int(once))]
    done = subprocess.run(args + (["--count"] if count else []), capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="tiny,small")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--child", nargs=5)
    parser.add_argument("--count", action="store_true")
    a = parser.parse_args()
    if a.child:
        size, p, t, n, once = a.child
        print(json.dumps(child(size, int(p), int(t), int(n), once == "1", a.count)))
        return
    print(f"{a.prompts} prompts x {a.tokens} tokens x num_samples {a.samples}, one prefill in a fresh process")
    for size in a.sizes.split(","):
        old, new = (run(size, a.prompts, a.tokens, a.samples, once, True) for once in (False, True))
        old_rss, new_rss = (run(size, a.prompts, a.tokens, a.samples, once, False)["grown"] for once in (False, True))
        print(
            f"{size}: rows prefilled {old['rows']} -> {new['rows']}; elements written {old['written']:,} -> "
            f"{new['written']:,} ({old['written'] / new['written']:.1f}x fewer); peak RSS grew "
            f"{old_rss / 2**20:.1f} -> {new_rss / 2**20:.1f} MiB ({old_rss / new_rss:.1f}x less; the KV cache was "
            f"allocated before); the check counts for such a prefill {old['counted'] / 2**20:.1f} -> "
            f"{new['counted'] / 2**20:.1f} MiB ({old['counted'] / old_rss:.2f}x, {new['counted'] / new_rss:.2f}x "
            "what it grew)"
        )


if __name__ == "__main__":
    main()
