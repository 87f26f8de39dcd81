"""``corpus.tiles`` covers the whole text: every byte after the first is predicted by some tile."""

import itertools

import pytest

from rlnb.tasks import corpus


@pytest.mark.parametrize("window", [1, 2, 3, 4, 7, 16, 30])
def test_tiles_cover_every_byte_on_sizes_around_the_tile_length(window):
    """The stride (``window // 2``) alone stopped short of the end on most sizes: on ``window + 1 + k`` bytes the last
    ``k % stride`` bytes were in no tile. Each text here has distinct bytes, so a tile's offset is where it starts."""
    size = window + 1
    for n in range(size, min(3 * size + 3, 94) + 1):
        text = "".join(chr(33 + i) for i in range(n))
        tiles = corpus.tiles(text, window)
        starts = [text.index(bytes(t).decode()) for t in tiles]
        assert all(len(t) == size for t in tiles) and starts == sorted(set(starts)), (n, starts)
        covered = {o + j for o in starts for j in range(size)}
        assert starts[0] == 0 and covered == set(range(n)), (n, starts)
        assert all(b - a <= max(window // 2, 1) for a, b in itertools.pairwise(starts)), (n, starts)


def test_the_held_out_cover_of_notebook_02_reaches_the_texts_end():
    """At ``window=64`` the 497-byte held-out text's last 16 bytes were in no tile: its measured loss left them out."""
    text = corpus.HELDOUT_TEXT.encode()
    tiles = corpus.tiles(corpus.HELDOUT_TEXT, 64)
    assert len(text) == 497 and bytes(tiles[-1]) == text[-65:] and bytes(tiles[0]) == text[:65]
    assert [bytes(t) for t in tiles[:-1]] == [text[o : o + 65] for o in range(0, 433, 32)]
