"""The options both subcommands take (``--device``, ``--dtype``, ``--threads``), and the reading of an integer
option, written once so they read and check alike."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any, NoReturn

from rlnb._input.checks import ascii_number
from rlnb._input.shown import shown
from rlnb.engine.dtypes import WEIGHT_DTYPES

if TYPE_CHECKING:  # rlnb.errors reads rlnb.wire (pydantic): not for ``--help``
    from rlnb.errors import OptionRefused

_INTEGER = re.compile(r"[+-]?[0-9]+")
_NEGATIVE = re.compile(r"-([0-9.]|inf|nan)", re.IGNORECASE)
_EXPECTED = re.compile(r"argument (?:\S+/)*(--?[^\s/]+): expected one argument")
"""argparse's words for an option given no value (``-n/--steps``: named by its last spelling)."""
MAX_DIGITS = 40
"""The most digits an integer option takes: each option's range fits in 20. Past 4300 ``int`` refused the text, said
as "not in ASCII digits"; below that each range's error echoed all of them, a line of thousands of characters."""


class TooLong(ValueError):
    """An integer of more than ``MAX_DIGITS`` digits."""


def ascii_integer(text: str) -> int:
    """``text`` as an integer: ASCII digits 0-9 and a sign only, at most ``MAX_DIGITS`` of them (``ValueError``
    otherwise, ``TooLong`` for too many). ``int`` also reads other scripts' digits ('８０００', '٨٠٠٠'), underscores and
    spaces around it: ``--port ８０００`` listened on 8000."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"not an integer in ASCII digits 0-9: {shown(text)}")
    if len(text.lstrip("+-")) > MAX_DIGITS:
        raise TooLong(f"must be an integer of at most {MAX_DIGITS} digits (each option's range fits in 20), got one of "
                      f"{len(text.lstrip('+-'))} digits: {shown(text)}")  # fmt: skip
    return int(text)


def integer(text: str) -> int:
    """argparse's ``type=`` for an integer option: ``ascii_integer``, refused naming the option (argparse's
    ``argument --steps: ...``, exit 2). Its range is each option's own check."""
    try:
        return ascii_integer(text)
    except TooLong as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer in ASCII digits 0-9, got {shown(text)}") from None


def number(text: str) -> float:
    """argparse's ``type=`` for a number option: ``ascii_number``, refused naming the option, as ``integer``; a
    number too small for a float, refused as typed (``--lr 1e-400`` was "got 0.0"), even where 0 is in range
    (``--op-delay 1e-400``): the command runs with no value other than the one typed; 0 is written 0."""
    try:
        value = ascii_number(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in ASCII digits 0-9, got {shown(text)}") from None
    if value == 0 and re.search("[1-9]", re.split("[eE]", text)[0]):
        raise argparse.ArgumentTypeError(f"{shown(text)} underflows to 0 in a float (the least is about 5e-324)")
    return value


SECRET_WORDS = ("token", "key", "secret", "password")
"""Words in an option's name that say its value may be a secret: never shown when what was typed is refused."""


def may_name_secret(option: str) -> bool:
    """Whether the word typed after ``option`` may be a secret: its name holds one of ``SECRET_WORDS`` (``--api-key``)
    or is ``--token`` misspelt (``--tokn``, ``--tok``; not ``--task``)."""
    import difflib

    name = option.partition("=")[0].lower()
    near = difflib.SequenceMatcher(None, name, "--token").ratio() >= 0.8
    return option.startswith("-") and (near or any(w in name for w in SECRET_WORDS))


class Parser(argparse.ArgumentParser):
    """argparse's parser, for which a value that begins with "-" and a digit, a point or inf/nan is a value, not an
    option name: its own rule knows only ``-5`` and ``-.5``, so ``--lr -1e-3`` (and ``-inf``) was "argument --lr:
    expected one argument" where ``--lr=-1e-3`` is refused naming the value. No option of rlnb's is spelt so.
    (``_negative_number_matcher`` is argparse's own; from Python 3.14 its rule takes ``-1e-3`` too, not ``-inf``.)"""

    typed: tuple[str, ...] = ()
    """The words typed, where the caller sets them: one after an option that may name a secret is masked in an error
    (``rlnb --tokn sk-... serve``: ``invalid choice: 'sk-...'``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # ``--ste 5`` ran with --steps 5, and ``--tok`` took --token's value
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE

    def add_argument(self, *args: Any, **kwargs: Any) -> Any:
        """argparse's, an option that takes one value given once (``_Once``): a repeatable one says so itself."""
        if kwargs.get("action") is None and args and args[0].startswith("-"):
            kwargs["action"] = _Once
        return super().add_argument(*args, **kwargs)

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:
        for action in self._actions:
            if isinstance(action, _Once):
                action.given = False
        return super().parse_known_args(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """argparse's refusal; "expected one argument" also says how to give a value that begins with "-" (a token
        ``-abc...`` after a space read as an option's name, naming neither), without showing the value."""
        if (wanting := _EXPECTED.fullmatch(message)) is not None:
            message += (
                f" (a value that begins with '-' is read as an option's name: give it joined, {wanting[1]}=VALUE)"
            )
        for before, word in zip(self.typed, self.typed[1:], strict=False):
            if may_name_secret(before) and "=" not in before:
                message = message.replace(repr(word), "***")
        super().error(message)


class _Once(argparse._StoreAction):
    """An option's value, refused when it is given again (``--steps 1 ... --steps 3`` ran 3 steps without a word: a
    script's default after a user's value replaced it). The values are not shown: one may be ``--token``'s."""

    given = False

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: str | None = None) -> None:
        if self.given:
            raise argparse.ArgumentError(self, "given twice: give it once")
        self.given = True
        super().__call__(parser, namespace, values, option)


def threads_argument(p: argparse.ArgumentParser, why: str) -> None:
    """``--threads N`` (``rlnb demo``, ``rlnb serve``), ``why``: what a fixed count is for, said in its help."""
    p.add_argument(
        "--threads",
        type=integer,
        default=None,
        metavar="N",
        help=f"torch's intra-op threads on the CPU, 1-1024, as rlnb.connect(threads=N): {why} (default: the engine's "
        "thread policy picks them from the machine's load)",
    )


def checked_threads(threads: object) -> int | None:
    """``--threads``' value as ``check_threads`` takes it, or a ``ValueError`` naming the option and its range."""
    from rlnb.engine.threads import MAX_THREADS, check_threads  # torch: not for ``--help``

    try:
        return check_threads(threads)
    except ValueError:
        raise ValueError(
            f"--threads must be an integer in [1, {MAX_THREADS}] (leave it out: the engine's thread policy decides), "
            f"got {threads!r}"
        ) from None


def threads_said(fixed: int | None, started: int | None = None) -> str:
    """What a command says of its thread count: ``--threads``' ``fixed`` one, else the policy's (``started``: the count
    it started with, where known), which may change with the load: a seeded run repeats bit for bit at a fixed count
    only."""
    if fixed is not None:
        return str(fixed)
    auto = "the policy may change it with the load; --threads N fixes it"
    return f"auto ({auto})" if started is None else f"{started} (auto: {auto})"


def device_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device", default="auto", help="auto (CUDA when available), cpu, cuda, cuda:N (default: %(default)s)"
    )


def dtype_argument(p: argparse.ArgumentParser, choices: tuple[str, ...] = WEIGHT_DTYPES, more: str = "") -> None:
    """``--dtype``, one of ``choices`` (the engine's, or fewer), ``more`` said after its help."""
    p.add_argument(
        "--dtype",
        default="auto",
        choices=choices,
        help=f"weights' dtype; auto: the checkpoint's own, float32 for the built-ins{more} (default: auto)",
    )


def exit_with_stdin_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--exit-with-stdin",
        action="store_true",
        help="stop, as at SIGTERM, when stdin reaches its end: the process that started the server holds the pipe, "
        "so the server does not outlive it, even SIGKILLed (rlnb.testing.ServerProcess passes it)",
    )


def refused_option(exc: OptionRefused, option: str) -> str:
    """The engine's refusal of a session option said naming ``option``, the command line's spelling of its field: in
    the field's place where the message begins with it (``device='cuda' but`` as ``--device 'cuda' but``, ``lora: rank``
    as ``--lora: rank``, ``model 'x' is`` as ``--model 'x' is``), before the message otherwise (``--model: '/x' is a
    directory``). ``rlnb demo`` and ``rlnb serve`` say it alike."""
    text, field = str(exc), exc.field
    if text.startswith(f"{field}="):
        return f"{option} {text[len(field) + 1 :]}"
    if text.startswith((f"{field}: ", f"{field} ")):
        return option + text[len(field) :]
    return f"{option}: {text}"
