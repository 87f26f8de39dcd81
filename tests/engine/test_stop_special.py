"""A stop string is matched on text that holds special tokens' text (``stop=["<|im_start|>"]`` ends a sequence on
that token), while a sequence's ``.text`` leaves special tokens out: docs/sampling.md says both."""

import pytest

from tests.support import hf_models

pytestmark = pytest.mark.slow  # builds and loads a tiny Hugging Face model


def test_a_stop_string_matches_a_special_tokens_text_that_the_sequences_text_leaves_out(tmp_path):
    session = hf_models.local(str(hf_models.save("llama", tmp_path / "m")), threads=1)
    try:
        bos = session.codec.decode([1])
        assert bos == "<s>"
        out = session.sample(["the quick n="], num_samples=64, max_tokens=80, seed=4, stop=[bos]).result()
        ended = [q for q in out.results[0].sequences if q.tokens[-1] == 1]
        assert ended and all(q.stop_reason == "STOP_REASON_STOP" for q in ended)
        assert all(bos not in q.text for q in ended)
    finally:
        session.close()
