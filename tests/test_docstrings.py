"""rlnb's docstrings and comments say what the code does and why, never what older code did: ``help()`` shows the
docstrings to users, and a reader of the code wants the reason a thing is so, not its story (that is in git log,
bench/README.md and docs/reliability.md's rows)."""

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HISTORY = re.compile(
    r"\b(?:round|session|issue) \d+\b(?![.,]\d)|\b(?:review|mend)\d+[a-z]\b"
    r"|(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )(?<!\bwas )(?<!\bwere )\bused to\b"
    r"|\bpreviously\b|\bformerly\b|\bwas once\b|\bit said\b|\(it was\b|; it was\b"
    r"|(?:\(|[;:] )(?:it|they) (?:went|kept|failed|raised|ran|took|hung|crashed|showed|broke|said|gave|got|wrote|stayed"
    r"|lost|grew)\b",
    re.I,
)
"""A narrow pattern of narration: a session, round or issue number ("issue 20", not "a session 1.4x faster"), a
review's or mend's tag ("(review42a M2)", "mend40b": docs/reliability.md's rows hold that story),
"used to" but for "is/are/was/were/be/been used to" (purpose), "previously", "formerly", "was once", "it said",
"(it was ...", "; it was ..." and a clause opened by "(", ";" or ":" whose subject "it" or "they" did something in
the past (": it kept showing ..."). It misses narration in other words ("the wait went on to the timeout"), and a
participle of purpose ("the key used to sign") reads as history: write "the key that signs"."""


def _texts(path: Path) -> list[tuple[int, str]]:
    """The comments and the docstrings (a string that is a statement of its own: a module's, class's or function's,
    or an attribute's after its assignment) of one module, each with its first line, whitespace runs as one space.
    ``tokenize`` alone: parsing with ``ast`` as well would double the time it takes."""
    found = []
    before = tokenize.NEWLINE
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline))
    for token, after in zip(tokens, tokens[1:], strict=False):
        if token.type == tokenize.COMMENT or (
            token.type == tokenize.STRING
            and before in {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
            and after.type in {tokenize.NEWLINE, tokenize.COMMENT, tokenize.ENDMARKER}
        ):
            found.append((token.start[0], token.string))
        if token.type not in {tokenize.COMMENT, tokenize.NL}:
            before = token.type
    return [(line, " ".join(text.split())) for line, text in found]


CUE = re.compile(
    r"used to|previously|formerly|was once|it said|\(it |\(they |[;:] (?:it|they) |(?:round|session|issue) \d"
    r"|(?:review|mend)\d"
)
"""Where a match of ``HISTORY`` can start, in lower case: a pattern of plain words is 5-10x faster to search than
``HISTORY``, whose word boundaries and lookbehinds are tried at every character (1.5 s for the package)."""


def _suspect(path: Path) -> bool:
    """Whether ``HISTORY`` matches somewhere in the module's whole text, whitespace runs as one space: its docstrings
    and comments are parts of that text, so only such a module is tokenized."""
    text = " ".join(path.read_text(encoding="utf-8").split()).lower()
    return any(HISTORY.match(text, m.start()) for m in CUE.finditer(text))


def test_the_docstrings_and_comments_of_rlnb_say_what_the_code_does_not_what_it_did():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text[max(0, m.start() - 50) : m.end() + 30]!r}"
        for path in sorted((ROOT / "rlnb").rglob("*.py"))
        if _suspect(path)
        for line, text in _texts(path)
        for m in HISTORY.finditer(text)
    ]
    assert found == [], "history in rlnb's docstrings or comments (say what happens and why):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "text",
    [
        "operation runs for minutes must not hold a request thread (45 such stops used to take the whole pool)",
        "both read it first, and both used to run)",
        "the largest Python cost a batched member adds to a step (issue 20; bench/README.md)",
        "``summarize``'s) is a ``ValueError`` naming ``trials`` (it was a bare ``KeyError: 'run_path'``)",
        "hidden while not past (it kept naming the old total steps, floor and rate)",
        '# before the line: it said "ready" while Run was still disabled',
        "as in transformers; it was refused as a value not given",
        "Each mixin previously repeated the ones it called",
        "the engine speaks the wire's names; the form, the params' (review42c L6)",
        "varied up to 1.3x from run to run; mend40b)",
    ],
)
def test_the_pattern_finds_narration(text):
    found = HISTORY.search(text)
    assert found
    assert CUE.match(text.lower(), found.start()), "CUE must start where HISTORY does, or the scan skips the module"


@pytest.mark.parametrize(
    "text",
    [
        "The Idempotency-Key it was submitted with.",
        "stop sessions it no longer needs, or restart rlnb serve",
        "a lone ``small`` session 1.4-3x *faster*",
        "the seed is used to draw the first batch",
        "Reported FAILED (a session's optim-step: it made no step).",
        "so that the error can say where it was",
    ],
)
def test_the_pattern_passes_the_present_tense(text):
    assert not HISTORY.search(text)


def test_the_scan_reads_the_comments_and_docstrings_and_no_other_string(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        '"""Module, it said."""\n\n'
        "X = 1\n"
        '"""Of X."""\n\n\n'
        "def f():  # a comment\n"
        '    """Of f."""\n'
        '    g("an argument, it said")\n'
        '    return """a value"""\n\n\n'
        "class C:\n"
        "    def m(self):\n"
        "        pass\n\n"
        '    """Of C, after a method."""\n',
        encoding="utf-8",
    )
    assert _texts(module) == [
        (1, '"""Module, it said."""'),
        (4, '"""Of X."""'),
        (7, "# a comment"),
        (8, '"""Of f."""'),
        (17, '"""Of C, after a method."""'),
    ]
    assert _suspect(module)
