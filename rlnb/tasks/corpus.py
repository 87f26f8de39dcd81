"""Next-token prediction on a small English corpus: the supervised lesson of notebook 02 (Adam vs Muon).

``CORPUS`` is original prose (plain ASCII: one byte is one character and one token of the byte-level
built-in models). The last 15% is held out: a loss measured there shows what generalises beyond the
windows the model memorised. ``batch`` draws random training windows and ``tiles`` covers a text with
fixed windows; ``cross_entropy`` turns windows into samples whose weights make the reported loss the
mean nats per predicted token.
"""

from __future__ import annotations

import random

from rlnb import samples
from rlnb._input.checks import check_int
from rlnb.wire import Sample

CORPUS = (
    "A training run is a conversation between a model and the data it sees. Each step the model reads a "
    "few windows of text, guesses the next character at every position, and is told how wrong it was. The "
    "size of that error, averaged over the characters, is the loss, measured in nats per token. A model "
    "that knows nothing spreads its guesses evenly over all two hundred and fifty six bytes and pays about "
    "five and a half nats for every one of them. A model that has learned which letters are common pays "
    "less, and one that has learned which words follow which pays less again.\n"
    "The optimizer decides how the weights move after each step. Adam keeps a running average of every "
    "gradient and of its square, and moves each weight by roughly the same small amount in the direction "
    "the average points. Muon treats each weight matrix as a whole: it takes the momentum of the gradient, "
    "makes its singular values nearly equal, and moves the matrix by that orthogonal step. Embeddings, the "
    "output head, norms and biases are not such matrices, so they stay with Adam.\n"
    "Neither rule is right for every model. On a small transformer trained on text, the orthogonal step "
    "often lowers the loss faster for the same number of steps, because no direction of a matrix is left "
    "behind while another runs ahead. On a tiny reinforcement learning task the difference is usually lost "
    "in the noise between seeds, and the learning rate matters far more than the choice of optimizer.\n"
    "The learning rate is the first thing to get right. Too small, and the loss hardly moves in the time "
    "you have. Too large, and the first few steps throw the weights so far that the model forgets what "
    "little it knew, or settles on one answer for every question. Somewhere between the two is a range "
    "where training is quick and steady. A sweep finds that range by trying several rates on several "
    "seeds; a range test finds a first guess in a single run, by raising the rate a little at every step "
    "and watching where the loss falls fastest.\n"
    "Good lessons are the ones that hold when you run them again. A result that appears on one seed and "
    "vanishes on the next is not a lesson but an accident, so every claim here is checked on ten seeds "
    "before it is written down. When a claim fails, the honest thing is to say so, and to say what was "
    "tried, rather than to pick the seed that agrees.\n"
    "Reinforcement learning adds one more way to go wrong. The model is rewarded for what it writes, and a "
    "reward that can be earned without solving the task will be earned that way. If the reward counts the "
    "digits in an answer, a string of eights is a perfect answer. If the reward checks that the answer is "
    "correct, the only way to score is to be right. That is why every task here keeps its reward and its "
    "evaluation apart: the reward is what the model is trained on, and the accuracy on questions it has "
    "never seen is what we believe.\n"
    "The notebooks are short on purpose. Each one asks a single question, answers it in a minute or two on "
    "an ordinary laptop, and prints the numbers it relies on, so that you can change one thing and see "
    "whether the answer changes with it. Start with the defaults, read the plots, then break something on "
    "purpose: raise the learning rate tenfold, halve the batch, or swap the optimizer, and watch what "
    "happens to the loss, the reward and the accuracy.\n"
)
SPLIT = int(len(CORPUS) * 0.85)
TRAIN_TEXT, HELDOUT_TEXT = CORPUS[:SPLIT], CORPUS[SPLIT:]


def batch(text: str, n: int, window: int, rng: random.Random) -> list[list[int]]:
    """``n`` random windows of ``window + 1`` bytes of ``text`` (a window predicts its last ``window``)."""
    n = check_int("n", n, 1)
    data, window = _windows_of(text, window)
    return [list(data[o : o + window + 1]) for o in (rng.randrange(len(data) - window) for _ in range(n))]


def tiles(text: str, window: int) -> list[list[int]]:
    """Windows of ``window + 1`` bytes every ``window // 2`` bytes, and one that ends at the text's end: a fixed cover
    of ``text`` to measure on, every byte after the first predicted (the stride alone would leave up to ``window // 2``
    bytes out: the held-out text's last 16 of 497 at ``window=64``)."""
    data, window = _windows_of(text, window)
    last = len(data) - window - 1  # the offset of the window that ends at the end
    starts = list(range(0, last + 1, max(window // 2, 1)))
    return [list(data[o : o + window + 1]) for o in starts + ([last] if starts[-1] != last else [])]


def _windows_of(text: str, window: int) -> tuple[bytes, int]:
    """``text`` as bytes and ``window`` as an int, or a ``ValueError`` naming it and its range: a window of at least
    one predicted byte, shorter than the text (0, -3 or 2.5 failed in ``cross_entropy`` or ``range``, naming
    neither)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, such as TRAIN_TEXT, got {type(text).__name__}")
    data = text.encode()
    if len(data) < 2:
        raise ValueError(f"text must be at least 2 bytes long (a window of 1 byte and the byte it predicts), got "
                         f"{len(data)}")  # fmt: skip
    return data, check_int("window", window, 1, len(data) - 1)


def cross_entropy(windows: list[list[int]]) -> list[Sample]:
    """Cross-entropy samples of ``windows``, each predicted token weighted 1/N, so a forward-backward's
    loss is the mean nats per token over the batch."""
    short = [i for i, w in enumerate(windows) if len(w) < 2]
    if not windows or short:
        raise ValueError(f"windows must be a non-empty list of windows of at least 2 tokens; too short: {short}")
    n = sum(len(w) - 1 for w in windows)
    return [samples.cross_entropy(w, [0.0] + [1.0 / n] * (len(w) - 1)) for w in windows]
