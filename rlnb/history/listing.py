"""What ``rlnb.runs`` reads of a run folder (``listed``): its config and each operation's latest record, the same
records ``History.load`` gives, for two thirds of its CPU time (``bench/bench_history_load.py``). The figures and
completions, which the listing does not show, are not read; an operation's first line, which its last supersedes, is
not parsed.
"""

from __future__ import annotations

from pathlib import Path

from rlnb._checks import user_path
from rlnb.history.loaded import from_row
from rlnb.history.reading import loads, numbered_lines, opened_to_read, read_config, warn_corrupt
from rlnb.history.record import MAX_SEQ, Record, warn_bad
from rlnb.history.runs import RunFolder, read_ops, read_run
from rlnb.history.store import COMPLETIONS_FILE, METRICS_FILE, OPS_FILE

PREFIX = '{"seq":'
"""How every line rlnb writes to ``ops.jsonl`` begins (``seq`` is the first field), followed by the seq's digits."""
SEQ_DIGITS = len(str(MAX_SEQ))
"""The most digits a seq has: a longer run of them (past 4,300, ``int`` refuses it) reads the file as a load does."""


def listed(path: Path) -> RunFolder:
    """The config and records of the run folder at ``path`` (``latest_records``). The other files are opened all
    the same: one that cannot be read is the listing's ``error``, as it is ``History.load``'s."""
    path = user_path("path", path)
    if not (path / OPS_FILE).is_file():
        return read_run(path)  # its error, as History.load says it
    config, damaged = read_config(path)
    records = latest_records(path / OPS_FILE)
    for name in (METRICS_FILE, COMPLETIONS_FILE):
        opened_to_read(path / name)
    return RunFolder(path, config, records, config_damaged=damaged)


def latest_records(file: Path) -> list[Record]:
    """``read_ops(file)``'s records, parsing only the lines that give them: each ``seq``'s last line (its seq read from
    its ``PREFIX``), or the one before it where the last does not parse with that seq and a kind (a torn last line).
    Anything else — a line of another shape (a hand edit, an older rlnb's), an operation neither of whose last two
    lines gives it — reads the whole file through ``read_ops``. Lines are kept as text alone (no object the garbage
    collector scans)."""
    last: dict[int, str] = {}
    before: dict[int, str] = {}
    count: dict[int, int] = {}
    at: dict[int, int] = {}  # each seq's last line number, for the warning
    for n, line in numbered_lines(file):  # as read_jsonl reads them
        end = line.find(",", len(PREFIX)) if line.startswith(PREFIX) else -1
        digits = line[len(PREFIX) : end] if end > 0 else ""
        if digits.isascii() and digits.isdigit() and len(digits) <= SEQ_DIGITS and int(digits) < MAX_SEQ:
            seq = int(digits)
            if seq in last:
                before[seq] = last[seq]
            last[seq], at[seq], count[seq] = line, n, count.get(seq, 0) + 1
        elif line.strip():
            return read_ops(file)
    records: list[Record] = []
    bad: list[str] = []
    corrupt: list[int] = []
    for seq in sorted(last):
        tried = (last[seq], before[seq]) if seq in before else (last[seq],)
        for i, line in enumerate(tried):
            try:
                row = loads(line)
            except ValueError:
                if i == 0:
                    corrupt.append(at[seq])
                continue
            if row.get("seq") != seq or type(row["seq"]) is not int:  # a key given twice: the last one counts
                return read_ops(file)
            rec = from_row(row, bad)
            if rec is not None:
                records.append(rec)
                break
        else:  # none of the lines tried gives the operation: an earlier one may
            if count[seq] > len(tried):
                return read_ops(file)
    warn_bad(file, bad)
    warn_corrupt(file, corrupt, stacklevel=5)
    return records
