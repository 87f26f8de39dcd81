"""What ``rlnb.runs`` reads of a run folder (``listed``): its config and each operation's latest record, the same
records ``History.load`` gives, for two thirds of its CPU time (``bench/bench_history_load.py``). The figures and
completions, which the listing does not show, are not read; an operation's first line, which its last supersedes, is
not parsed.
"""

from __future__ import annotations

from pathlib import Path

from rlnb._input.checks import user_path
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
    lines gives it, a file that changed between the two reads — reads the whole file through ``read_ops``. The first
    read keeps each seq's line numbers alone, the second the text of a line before a seq's last only until that last
    one: the two lines' text of every seq would hold the whole file as text (more than a load needs)."""
    last: dict[int, int] = {}  # seq -> its last line's number
    before: dict[int, int] = {}  # seq -> the number of the line before that one
    more: set[int] = set()  # the seqs of more than two lines
    for n, line in numbered_lines(file):  # as read_jsonl reads them
        seq = _seq(line)
        if seq is not None:
            if seq in before:
                more.add(seq)
            if seq in last:
                before[seq] = last[seq]
            last[seq] = n
        elif line.strip():
            return read_ops(file)
    held: dict[int, str] = {}  # seq -> the text of its line before the last, until the last is read
    found: dict[int, Record | None] = {}  # seq -> its record (None: neither line gives it)
    said: dict[int, list[str]] = {}  # seq -> what ``from_row`` said of it
    torn: list[int] = []  # the seqs whose last line is corrupt
    for n, line in numbered_lines(file):
        seq = _seq(line)
        if seq is None and line.strip():
            return read_ops(file)
        if seq is None or seq not in last:  # a blank line, or one appended since the first read
            continue
        if before.get(seq) == n:
            held[seq] = line
        elif last[seq] == n:
            tried = (line, held.pop(seq)) if seq in held else (line,)
            got = _parse(seq, tried)
            if got is None or (got[0] is None and seq in more):  # an earlier line may give it
                return read_ops(file)
            found[seq] = got[0]
            if got[1]:
                said[seq] = got[1]
            if got[2]:
                torn.append(seq)
    if len(found) < len(last):  # the file changed between the two reads
        return read_ops(file)
    records = [rec for _, rec in sorted(found.items()) if rec is not None]
    warn_bad(file, [text for _, texts in sorted(said.items()) for text in texts])
    warn_corrupt(file, [last[seq] for seq in sorted(torn)], stacklevel=5)
    return records


def _seq(line: str) -> int | None:
    """The seq a line of ``ops.jsonl`` begins with (``PREFIX``), or None."""
    end = line.find(",", len(PREFIX)) if line.startswith(PREFIX) else -1
    digits = line[len(PREFIX) : end] if end > 0 else ""
    if digits.isascii() and digits.isdigit() and len(digits) <= SEQ_DIGITS and int(digits) < MAX_SEQ:
        return int(digits)
    return None


def _parse(seq: int, tried: tuple[str, ...]) -> tuple[Record | None, list[str], bool] | None:
    """The record of ``seq`` from the first of its lines ``tried`` (its last, then the one before) that gives it, what
    ``from_row`` said of it, and whether its last line is corrupt (torn); None where a line holds another seq (a key
    given twice: the last one counts), which a whole read must sort out."""
    bad: list[str] = []
    torn = False
    for i, line in enumerate(tried):
        try:
            row = loads(line)
        except ValueError:
            torn = torn or i == 0
            continue
        if row.get("seq") != seq or type(row["seq"]) is not int:
            return None
        rec = from_row(row, bad)
        if rec is not None:
            return rec, bad, torn
    return None, bad, torn
