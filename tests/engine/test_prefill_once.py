"""A prompt's samples share its prefill: each decoder runs a prompt once and repeats its keys and values for its
``num_samples`` rows. The reference is the old batch, every prompt repeated ``n`` times and each row prefilled
(``draw`` of the repeated prompts, one sample each, at the same uniforms): the same tokens, log-probs to 1e-5."""

import pytest
import torch

import rlnb
from rlnb.engine import sampling
from rlnb.engine.models.factory import build_adapter
from tests.support.server import app_client

CPU = torch.device("cpu")
PROMPTS = [list(b"n="), list(b"the loss goes down"), list(b"a")]  # left padding: rows start at different slots
N, STEPS, SEED = 4, 12, 7


def prefills(module: torch.nn.Module) -> list[tuple[int, int]]:
    """The (rows, tokens) of each call into ``module`` of more than one token a row: the prefills."""
    seen: list[tuple[int, int]] = []
    module.register_forward_pre_hook(lambda m, args: seen.append(tuple(args[0].shape[:2])) if args[0].ndim > 1 and
                                     args[0].shape[1] > 1 else None)  # fmt: skip
    return seen


def once_and_repeated(adapter, decoder, prompts, n=N, **settings):
    """``draw`` of each prompt's ``n`` samples, and of every prompt repeated ``n`` times, one sample each."""
    cfg = sampling.Settings(max_tokens=STEPS, **settings)
    noise = sampling.uniforms(SEED, len(prompts), n, STEPS, CPU)
    repeated = [p for p in prompts for _ in range(n)]
    with torch.no_grad():
        once = sampling.draw(decoder(len(prompts) * n), prompts, n, cfg, noise, adapter.codec, CPU)
        rows = sampling.draw(decoder(len(prompts) * n), repeated, 1, cfg, noise, adapter.codec, CPU)
    return once, rows


def assert_same(once, rows):
    assert once.tokens.tolist() == rows.tokens.tolist()
    assert once.lengths.tolist() == rows.lengths.tolist() and once.stopped.tolist() == rows.stopped.tolist()
    torch.testing.assert_close(once.logprobs, rows.logprobs, atol=1e-5, rtol=0)


def test_the_builtin_decoder_prefills_each_prompt_once_with_the_rows_tokens():
    adapter = build_adapter("tiny", seed=3, device=CPU)
    model = adapter.module.eval()
    seen = prefills(model.blocks[0])
    longest = max(map(len, PROMPTS))
    once, rows = once_and_repeated(adapter, lambda b: adapter.decoder(model, b, longest + STEPS + 3), PROMPTS,
                                   temperature=0.8, top_k=40)  # fmt: skip
    assert seen == [(len(PROMPTS), longest), (len(PROMPTS) * N, longest)]  # once a prompt, then the old batch
    assert_same(once, rows)
    assert len({tuple(t) for t in once.tokens[:N].tolist()}) > 1  # a prompt's samples still differ


def test_a_lone_prompt_prefills_once_for_any_number_of_samples():
    adapter = build_adapter("tiny", seed=3, device=CPU)
    model = adapter.module.eval()
    seen = prefills(model.blocks[0])
    once, rows = once_and_repeated(adapter, lambda b: adapter.decoder(model, b, 40), [list(b"abc")], n=16)
    assert seen[0] == (1, 3)
    assert_same(once, rows)


@pytest.mark.slow  # transformers
@pytest.mark.parametrize("static", [False, True])
def test_hf_decoders_prefill_each_prompt_once_with_the_rows_tokens(hf_dirs, static):
    """transformers' ``DynamicCache`` repeated (``batch_repeat_interleave``), or written into a ``StaticCache``."""
    from transformers import StaticCache

    from rlnb.engine.models.decoders import HFDecoder

    with rlnb.connect("local", model=hf_dirs["llama"], seed=1, device="cpu", record=False) as s:
        adapter, model = s.backend.adapter, s.backend.sampler
        prompts = [s.encode("n="), s.encode("the loss goes down"), s.encode("a")]
        length = max(map(len, prompts)) + STEPS + 5

        def decoder(rows: int) -> HFDecoder:
            cache = StaticCache(config=model.config, max_cache_len=length)
            return HFDecoder(model, (cache, length)) if static else HFDecoder(model)

        seen = prefills(model.get_input_embeddings())
        once, rows = once_and_repeated(adapter, decoder, prompts)
    assert seen == [(len(prompts), max(map(len, prompts))), (len(prompts) * N, max(map(len, prompts)))]
    assert_same(once, rows)


@pytest.mark.slow  # an in-process session and the app's (4 s on a loaded machine)
def test_a_sample_through_the_server_and_in_process_has_the_rows_tokens(tmp_path):
    adapter = build_adapter("tiny", seed=0, device=CPU)
    longest = max(map(len, PROMPTS))
    _, rows = once_and_repeated(adapter, lambda b: adapter.decoder(adapter.module.eval(), b, longest + STEPS),
                                PROMPTS)  # fmt: skip
    want = rows.tokens.view(len(PROMPTS), N, STEPS).tolist()
    with app_client(tmp_path) as c, rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=c,
                                                 record=False) as r:  # fmt: skip
        remote = r.sample(PROMPTS, num_samples=N, max_tokens=STEPS, seed=SEED).result(60)
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as s:
        local = s.sample(PROMPTS, num_samples=N, max_tokens=STEPS, seed=SEED).result(60)
    for out in (remote, local):
        assert [[q.tokens for q in res.sequences] for res in out.results] == want
        # a prompt's first sample computed its prompt, the others reused it
        hits = [[q.prompt_cache_hit_tokens for q in res.sequences] for res in out.results]
        assert hits == [[0] + [len(p)] * (N - 1) for p in PROMPTS]
        got = torch.tensor([q.logprobs for res in out.results for q in res.sequences])
        torch.testing.assert_close(got, rows.logprobs, atol=1e-5, rtol=0)


def test_the_memory_check_counts_the_prefill_once_a_prompt_besides_the_kv_cache(monkeypatch):
    """The check counted the KV cache alone, where the prefill's activations over every prompt token took 3-4x
    more on ``tiny`` (review39b: 1.6 GiB peak for a 402 MiB cache). With room for 3 KV caches, one sample of eight
    200-token prompts is refused; sixteen samples of them, whose prefill is the same, run."""
    from rlnb.engine import memory

    prompts = [[i + 1] * 200 for i in range(8)]
    with rlnb.connect("local", model="tiny", seed=0, device="cpu", record=False) as t:
        per_token = t.backend.engine.adapter.kv_bytes_per_token()
        for n in (1, 16):
            monkeypatch.setattr(memory, "free_memory", lambda device, n=n: 3 * 8 * n * 201 * per_token)
            if n == 1:
                with pytest.raises(rlnb.OperationFailed) as failed:
                    t.sample(prompts, max_tokens=1).result(60)
                assert failed.value.code == "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED"
                assert "this sample's KV cache and prefill would take" in failed.value.message
                assert "and its prefill: 8 prompts x 200 tokens (the longest prompt) x " in failed.value.message
            else:
                assert len(t.sample(prompts, num_samples=n, max_tokens=1).result(60).results) == 8


@pytest.mark.slow  # transformers, and the app's session on the same folder
def test_an_hf_sample_through_the_server_has_the_rows_tokens(hf_dirs, tmp_path):
    with rlnb.connect("local", model=hf_dirs["llama"], device="cpu", record=False) as s:
        adapter, model = s.backend.adapter, s.backend.sampler
        prompts = [s.encode("n="), s.encode("the loss goes down"), s.encode("a")]
        eos = tuple(adapter.codec.eos_token_ids)  # the server's sample stops at them
        _, rows = once_and_repeated(adapter, lambda b: adapter.decoder(model, b, 64), prompts, eos=eos)
    lengths = rows.lengths.tolist()
    want = [t[:k] for t, k in zip(rows.tokens.tolist(), lengths, strict=True)]
    want_logprobs = [lp for t, k in zip(rows.logprobs.tolist(), lengths, strict=True) for lp in t[:k]]
    with (
        app_client(tmp_path, models={"tiny/llama": hf_dirs["llama"]}) as c,
        rlnb.connect("http://testserver", base_model="tiny/llama", http_client=c, record=False) as r,
    ):
        out = r.sample(prompts, num_samples=N, max_tokens=STEPS, seed=SEED).result(60)
    got = [q for res in out.results for q in res.sequences]
    assert [q.tokens for q in got] == want
    got_logprobs = torch.tensor([lp for q in got for lp in q.logprobs])
    torch.testing.assert_close(got_logprobs, torch.tensor(want_logprobs), atol=1e-5, rtol=0)
    assert min(lengths) < STEPS  # a row that stopped at EOS is among them


@pytest.mark.slow  # transformers
def test_the_hf_memory_check_counts_an_attention_mask_only_for_padded_prompts(hf_dirs, monkeypatch):
    """HF's SDPA builds no mask for prompts of one length (plain causal attention), and a ``[P, T, T]`` mask, 5
    bytes a slot, for padded ones (review39e: peak RSS grew 19 MiB for one unpadded 4000-token prompt, where the
    check counted 91). With memory free between the two counts, equal-length prompts run and padded ones of the
    same longest length are refused."""
    from rlnb.engine import memory

    equal, padded = [[5] * 120, [6] * 120], [[5] * 120, [6] * 60]
    with rlnb.connect("local", model=hf_dirs["llama"], device="cpu", record=False) as s:
        adapter = s.backend.engine.adapter
        unmasked, masked = (
            adapter.prefill_bytes_per_token(120, False, False),
            adapter.prefill_bytes_per_token(120, True, False),
        )
        assert masked - unmasked >= 5 * 120  # the mask (and keys and values copied to every query head)
        cache = 2 * 121 * adapter.kv_bytes_per_token()
        room = cache + 2 * 120 * (unmasked + masked) // 2
        monkeypatch.setattr(memory, "host_available", lambda: room)
        assert len(s.sample(equal, max_tokens=1).result(60).results) == 2
        with pytest.raises(rlnb.OperationFailed) as failed:
            s.sample(padded, max_tokens=1).result(60)
        assert failed.value.code == "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED"


def test_a_plain_module_reports_no_prompt_cache_hits():
    """``RecomputeDecoder`` runs every row's whole sequence, prompt included, at each token (review39e: calls of
    (3, 4), (3, 5) ... rows x tokens): none of its samples reused a prompt, so none reports a hit."""
    from tests.support.bigram import Bigram

    model = Bigram()
    calls: list[tuple[int, ...]] = []
    model.emb.register_forward_pre_hook(lambda m, args: calls.append(tuple(args[0].shape)))
    with rlnb.connect("local", model=model, device="cpu", record=False) as s:
        out = s.sample([[1, 2, 3], [4]], num_samples=3, max_tokens=5, seed=5).result(60)
    assert (3, 5) in calls  # a step recomputed the first prompt's 3 tokens in each of its rows
    assert [[q.prompt_cache_hit_tokens for q in res.sequences] for res in out.results] == [[0, 0, 0], [0, 0, 0]]


def test_the_builtin_memory_check_counts_the_allocators_slack(monkeypatch):
    """A fresh process's prefill of 8 200-token prompts on ``tiny`` grew 6.3 KB a token where the check counted 5.1
    (mend40b): the count has ``HEAP_SLACK`` hidden widths more. With room for the count without them, refused."""
    from rlnb.engine import memory
    from rlnb.engine.models.adapter import HEAP_SLACK

    prompts = [[5 + i] * 200 for i in range(8)]
    with rlnb.connect("local", model="tiny", device="cpu", record=False) as s:
        adapter = s.backend.engine.adapter
        per_token = adapter.prefill_bytes_per_token(200, True, False)
        without = per_token - HEAP_SLACK * adapter.module.config.n_embd * 4
        assert per_token / without > 1.5  # 8.2 KB against 5.1
        monkeypatch.setattr(memory, "host_available", lambda: 8 * 201 * adapter.kv_bytes_per_token() + 1600 * without)
        with pytest.raises(rlnb.OperationFailed) as failed:
            s.sample(prompts, max_tokens=1).result(60)
        assert failed.value.code == "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED"
        monkeypatch.setattr(memory, "host_available", lambda: 8 * 201 * adapter.kv_bytes_per_token() + 1600 * per_token)
        assert len(s.sample(prompts, max_tokens=1).result(60).results) == 8
