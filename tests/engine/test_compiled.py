"""The static KV cache and compiled decoding: the same tokens as the plain recompute and as the eager step,
log-probs to 1e-5, compile times recorded, one graph per shape bucket. Compiling takes tens of seconds on a
CPU: those tests are slow."""

import json
import warnings

import pytest
import torch

import rlnb
from rlnb.engine import choice, sampling
from rlnb.engine.models.compiled import BUCKET, WINDOWS, Compiler, bucket, window
from rlnb.engine.models.decoders import DECODE_ATTENTION, HFDecoder, RecomputeDecoder
from rlnb.engine.models.factory import build_adapter

CPU = torch.device("cpu")


def tokens_and_logprobs(groups):
    return [[q.tokens for q in g] for g in groups], torch.tensor(
        [lp for g in groups for q in g for lp in q.logprobs], dtype=torch.float64
    )


def assert_same_samples(got, want):
    tokens_got, lp_got = tokens_and_logprobs(got)
    tokens_want, lp_want = tokens_and_logprobs(want)
    assert tokens_got == tokens_want
    torch.testing.assert_close(lp_got, lp_want, atol=1e-5, rtol=0)


def decode(adapter, decoder, prompts, n=3, max_tokens=20, seed=5, **settings):
    cfg = sampling.Settings(max_tokens=max_tokens, **settings)
    with torch.no_grad():
        return sampling.generate(decoder, prompts, n, cfg, seed, adapter.codec, CPU)


PROMPTS = [list(b"n="), list(b"the loss goes down"), list(b"a")]  # left padding: rows start at different slots


def test_the_static_cache_decodes_as_the_recompute():
    adapter = build_adapter("tiny", seed=3, device=CPU)
    model = adapter.module.eval()
    longest = max(map(len, PROMPTS)) + 20
    static = decode(adapter, adapter.decoder(model, 9, longest + 7), PROMPTS, top_p=0.9)  # spare slots stay hidden
    plain = decode(adapter, RecomputeDecoder(lambda ids, mask: adapter.forward(model, ids, mask)), PROMPTS, top_p=0.9)
    assert_same_samples(static, plain)


def test_an_eager_step_attends_over_the_filled_slots_only():
    """The eager static step slices the cache to its filled slots (a compiled one keeps every slot)."""
    adapter = build_adapter("tiny", seed=3, device=CPU)
    model = adapter.module.eval()
    attn, seen = model.blocks[0].attn, []
    kernel = attn.attention
    attn.attention = lambda q, k, v, **kw: (seen.append(k.shape[2]), kernel(q, k, v, **kw))[1]
    longest = max(map(len, PROMPTS))
    decode(adapter, adapter.decoder(model, 9, longest + 30), PROMPTS, max_tokens=5)
    assert seen == [longest, longest + 1, longest + 2, longest + 3, longest + 4]  # the prompts, then 4 steps


@pytest.mark.slow  # ~2 s of importing torch._dynamo (Compiler.wrap's config patch), though nothing compiles
def test_a_compiled_step_attends_over_a_window_of_the_filled_slots(monkeypatch):
    """The compiled step attends over the filled slots rounded up to a window (64, 128 of a 128-slot cache), not
    over every slot (2.51x the eager attention on ``small``, 16 x 200): one graph per window, each compile recorded
    with its window, the eager tokens. ``torch.compile`` stubbed out (compiling is slow): the steps it would get."""
    from rlnb.engine.models import compiled, tiny

    monkeypatch.setattr(compiled, "_compiled", lambda fn, device: fn)
    monkeypatch.setattr(compiled, "_SEEN", set())
    monkeypatch.setattr(compiled, "_EAGER", set())
    seen, attend = [], tiny.one_query_attention

    def attention(q, k, v, **kw):
        seen.append(k.shape[2])
        return attend(q, k, v, **kw)

    monkeypatch.setattr(tiny, "one_query_attention", attention)
    adapter = build_adapter("tiny", seed=3, device=CPU)
    model, compiler, prompts = adapter.module.eval(), Compiler(CPU), [list(b"n="), list(b"the loss goes down " * 3)]
    got = decode(adapter, adapter.decoder(model, 6, 128, compiler), prompts, max_tokens=12, top_p=0.9)
    want = decode(adapter, adapter.decoder(model, 6, 128), prompts, max_tokens=12, top_p=0.9)
    assert_same_samples(got, want)
    layers = adapter.module.config.n_layer
    assert len(seen) == 11 * layers  # 11 steps after the prompts' token, filling slots 58 to 68 of 128
    assert seen[::layers] == [64] * 7 + [128] * 4
    assert [(c["what"], c["length"], c["window"]) for c in compiler.compiles] == [
        ("decode step", 128, 64),
        ("decode step", 128, 128),
    ]


@pytest.mark.parametrize(
    ("filled", "length", "want"),
    [(1, 64, 64), (64, 64, 64), (3, 256, 64), (65, 256, 128), (202, 256, 256), (1, 1024, 256), (700, 1024, 768),
     (129, 300, 256), (290, 300, 300)],
)  # fmt: skip
def test_windows_are_the_filled_slots_rounded_up_at_most_four_a_cache(filled, length, want):
    assert window(filled, length) == want
    assert len({window(f, length) for f in range(1, length + 1)}) <= WINDOWS


@pytest.mark.slow  # a second decode with a static cache (~1 s); the static-cache concept stays fast in the test above
def test_a_reused_cache_is_emptied():
    adapter = build_adapter("tiny", seed=0, device=CPU)
    compiler = Compiler(CPU)
    first = compiler.cache(("builtin", 2, 8), lambda: adapter._static_cache(2, 8))
    first.k[0].fill_(float("nan"))
    first.real[0, 0] = False
    first.length = 5
    again = compiler.cache(("builtin", 2, 8), lambda: pytest.fail("made a second cache"))
    assert again is first and again.length == 0 and bool(again.real.all())
    assert all(bool((t == 0).all()) for t in [*again.k, *again.v])


@pytest.mark.parametrize(
    ("length", "limit", "want"), [(1, 256, BUCKET), (64, 256, 64), (65, 256, 128), (250, 256, 256), (300, 256, 300)]
)
def test_lengths_are_rounded_up_to_buckets_within_the_context(length, limit, want):
    assert bucket(length, limit) == want


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_compile_must_be_a_bool(bad):
    with pytest.raises(ValueError, match="compile must be True or False"):
        rlnb.connect("local", model="tiny", device="cpu", compile=bad, record=False)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a compile takes minutes on a loaded 2-core machine
def test_compiled_sampling_gives_the_eager_tokens_and_records_its_compiles(tmp_path):
    """Same model, same seed: the same tokens, log-probs to 1e-5; the compile is timed once per shape."""
    prompts = ["n=", "the loss goes down", "a"]  # one thread count: a graph is per count (the policy's may change)
    kw = {"model": "tiny", "seed": 2, "device": "cpu", "runs_dir": tmp_path, "threads": 1}
    with rlnb.connect("local", run_id="eager", **kw) as eager:
        want = eager.sample(prompts, num_samples=4, max_tokens=24, seed=7, top_k=50).result()
    with rlnb.connect("local", compile=True, run_id="compiled", **kw) as s:
        got = s.sample(prompts, num_samples=4, max_tokens=24, seed=7, top_k=50).result()
        again = s.sample(prompts, num_samples=4, max_tokens=30, seed=7, top_k=50).result()  # the same bucket
        paid = list(s.backend.engine.compiler.compiles)
    assert_same_samples([r.sequences for r in got.results], [r.sequences for r in want.results])
    assert [q.tokens[:24] for r in again.results for q in r.sequences] == [
        q.tokens for r in got.results for q in r.sequences
    ]  # a sample's first tokens do not depend on its length
    whats = sorted(c["what"] for c in paid)
    assert len(paid) <= 2 and set(whats) <= {"decode step", "token choice"}  # at most once each for this shape
    assert all(c["seconds"] > 0 for c in paid)
    written = json.loads((tmp_path / "compiled" / "config.json").read_text())
    assert written["compile"] is True and written.get("compiles", []) == paid
    assert json.loads((tmp_path / "eager" / "config.json").read_text())["compile"] is False


@pytest.mark.slow
@pytest.mark.timeout(1500)  # three decode-step compiles: minutes on a loaded 2-core machine
def test_a_compiled_sample_across_windows_gives_the_eager_tokens_one_graph_a_window():
    """150 tokens after an 18-token prompt fill slots 19 to 167 of a 192-slot cache: three attention windows (64,
    128, 192), each one compiled graph and one recorded compile; the eager tokens, log-probs to 1e-5."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    from rlnb.engine.models.tiny import TinyTransformer

    def graphs() -> int:
        return len(_debug_get_cache_entry_list(TinyTransformer.decode_step.__code__))

    prompts, kw = ["n=", "the loss goes down"], {"model": "tiny", "seed": 2, "device": "cpu", "record": False}
    with rlnb.connect("local", **kw) as eager:
        want = eager.sample(prompts, num_samples=3, max_tokens=150, seed=7).result()
    with rlnb.connect("local", compile=True, **kw) as s:
        before = graphs()
        got = s.sample(prompts, num_samples=3, max_tokens=150, seed=7).result(1400)  # a shape no other test makes
        steps = [c for c in s.backend.engine.compiler.compiles if c["what"] == "decode step"]
        assert graphs() - before == 3
    assert max(len(q.tokens) for r in want.results for q in r.sequences) == 150  # no early stop: every window
    assert_same_samples([r.sequences for r in got.results], [r.sequences for r in want.results])
    assert [(c["batch"], c["length"], c["window"]) for c in steps] == [(6, 192, 64), (6, 192, 128), (6, 192, 192)]


@pytest.mark.slow
def test_a_static_cache_decodes_hf_models_as_the_recompute(hf_dirs):
    from transformers import StaticCache

    with rlnb.connect("local", model=hf_dirs["llama"], seed=1, device="cpu", record=False) as s:
        adapter, model = s.backend.adapter, s.backend.sampler
        prompts = [s.encode("n="), s.encode("the loss goes down"), s.encode("a")]
        longest = max(map(len, prompts)) + 20
        cache = StaticCache(config=model.config, max_cache_len=longest + 5)
        static = decode(adapter, HFDecoder(model, (cache, longest + 5)), prompts)
        plain = decode(adapter, RecomputeDecoder(lambda ids, mask: adapter.forward(model, ids, mask)), prompts)
    assert_same_samples(static, plain)


@pytest.mark.slow  # transformers
def test_a_compiled_hf_step_attends_over_a_window_of_the_filled_slots(hf_dirs, monkeypatch):
    """As the built-in model's: a compiled Qwen3 step attends over the filled slots rounded up to a window (64, 128
    of a 128-slot ``StaticCache``), not every slot; one graph per window, each compile recorded with its window; the
    eager tokens. ``torch.compile`` stubbed out (compiling is slow): the steps it would get."""
    from rlnb.engine.models import compiled

    monkeypatch.setattr(compiled, "_compiled", lambda fn, device: fn)
    monkeypatch.setattr(compiled, "_SEEN", set())
    monkeypatch.setattr(compiled, "_EAGER", set())
    seen, sdpa = [], torch.nn.functional.scaled_dot_product_attention

    def attention(q, k, v, **kw):
        seen.append(k.shape[2])
        return sdpa(q, k, v, **kw)

    with rlnb.connect("local", model=hf_dirs["qwen3"], seed=1, device="cpu", record=False) as s:
        adapter, model, compiler = s.backend.adapter, s.backend.sampler, Compiler(CPU)
        prompts = [list(range(5, 10)), list(range(5, 63))]  # 58 slots filled by the prompts
        want = decode(adapter, adapter.decoder(model, 6, 128), prompts, max_tokens=12, top_p=0.9)
        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", attention)
        got = decode(adapter, adapter.decoder(model, 6, 128, compiler), prompts, max_tokens=12, top_p=0.9)
        layers = model.config.num_hidden_layers
    assert_same_samples(got, want)
    assert len(seen) == 12 * layers  # the prompts, then 11 steps filling slots 59 to 69 of 128
    assert seen[::layers] == [58] + [64] * 6 + [128] * 5  # the prefill: each prompt once, over its own slots
    assert [(c["what"], c["length"], c["window"]) for c in compiler.compiles] == [
        ("decode step", 128, 64),
        ("decode step", 128, 128),
    ]


@pytest.mark.slow
@pytest.mark.timeout(1500)  # two decode-step compiles: minutes on a loaded 2-core machine
def test_a_compiled_hf_sample_across_windows_gives_the_eager_tokens_one_graph_a_window(hf_dirs):
    """70 tokens after a short prompt fill two windows (64, 128) of a 128-slot ``StaticCache``: each one compiled
    graph and one recorded compile; the eager tokens, log-probs to 1e-5."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    from rlnb.engine.models.decoders import hf_step

    def graphs() -> int:
        return len(_debug_get_cache_entry_list(hf_step.__code__))

    kw = {"model": hf_dirs["qwen3"], "seed": 1, "device": "cpu", "record": False}
    with rlnb.connect("local", **kw) as eager:
        want = eager.sample(["n="], num_samples=5, max_tokens=70, seed=3).result()
    with rlnb.connect("local", compile=True, **kw) as s:
        before = graphs()
        got = s.sample(["n="], num_samples=5, max_tokens=70, seed=3).result(1400)  # a shape no other test makes
        steps = [c for c in s.backend.engine.compiler.compiles if c["what"] == "decode step"]
        assert graphs() - before == 2
    assert max(len(q.tokens) for r in want.results for q in r.sequences) == 70  # no early stop: both windows
    assert_same_samples([r.sequences for r in got.results], [r.sequences for r in want.results])
    assert [(c["batch"], c["length"], c["window"]) for c in steps] == [(5, 128, 64), (5, 128, 128)]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_compiled_hf_sampling_gives_the_eager_tokens(hf_dirs):
    prompts = ["n=", "the loss goes down"]
    kw = {"model": hf_dirs["llama"], "seed": 1, "device": "cpu", "record": False}
    with rlnb.connect("local", **kw) as eager:
        want = eager.sample(prompts, num_samples=3, max_tokens=16, seed=3).result()
    with rlnb.connect("local", compile=True, **kw) as s:
        got = s.sample(prompts, num_samples=3, max_tokens=16, seed=3).result()
        # grouped-query attention without copying the cache's heads, in the sampler's copy only
        assert s.backend.sampler.config._attn_implementation == DECODE_ATTENTION
        assert s.backend.trainer.config._attn_implementation == "sdpa"
    assert_same_samples([r.sequences for r in got.results], [r.sequences for r in want.results])


def test_one_query_attention_is_sdpa():
    from rlnb.engine.models.tiny import one_query_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 4, n, 8, generator=g) for n in (1, 10, 10))
    mask = torch.rand(3, 1, 1, 10, generator=g) > 0.3
    mask[..., 0] = True  # every row sees a key
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(one_query_attention(q, k, v, mask), want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("heads, kv_heads, masks", [(4, 2, "bool"), (4, 4, "bool"), (6, 2, "float"), (4, 2, None)])
def test_a_compiled_one_token_query_attends_as_products_and_sums_as_sdpa_would(heads, kv_heads, masks):
    """Under ``torch.compile`` a one-token query of ``DECODE_ATTENTION`` is products, sums and a softmax that the
    compiler fuses, not CPU's fused SDPA kernel (slow for one query: 19% of a compiled 3m sample's profile), grouped
    query heads included; the values are SDPA's. Traced by dynamo alone (no inductor): fast."""
    from rlnb.engine.models.decoders import decode_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, heads, 1, 8, generator=g), *(torch.randn(3, kv_heads, 10, 8, generator=g) for _ in "kv")
    module = torch.nn.Module()
    module.num_key_value_groups = heads // kv_heads
    mask = torch.rand(3, 1, 1, 10, generator=g) > 0.3
    mask[..., 0] = True  # every row sees a key
    if masks == "float":
        mask = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    mask = mask if masks else None
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3, enable_gqa=True)
    ops: list[object] = []

    def backend(gm: torch.fx.GraphModule, inputs: object) -> object:
        ops.extend(n.target for n in gm.graph.nodes if n.op == "call_function")
        return gm

    attend = torch.compile(decode_attention, backend=backend, fullgraph=True)
    got, _ = attend(module, q, k, v, mask, scaling=0.3)
    assert ops and torch.nn.functional.scaled_dot_product_attention not in ops
    torch.testing.assert_close(got, want.transpose(1, 2), atol=1e-6, rtol=1e-5)
    assert got.is_contiguous()


def test_on_a_cpu_a_sampling_choice_runs_eager_and_a_greedy_one_of_a_large_vocabulary_compiles():
    """On a CPU, inductor's sampling choice (softmax, cumsum, the log-prob) ran 1.14-2.18x slower than eager ``pick``
    (16 rows, vocabularies of 256-151,936; ``bench/bench_choice.py``), its greedy one 0.58-0.98x from 4,096 tokens but
    1.43-2.23x below: only a greedy choice of a large vocabulary compiles there. Nothing compiles in this test (a
    choice compiles at its first call)."""
    compiler, large = Compiler(CPU), choice.GREEDY_VOCAB
    for kind in ({"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.9, "top_k": 20}):
        settings = sampling.Settings(max_tokens=1, **kind)
        assert choice.compiled_pick(compiler, settings, torch.float32, 4, large, CPU) is choice.pick
    greedy = sampling.Settings(max_tokens=1, temperature=0.0)
    assert choice.compiled_pick(compiler, greedy, torch.float32, 4, large - 1, CPU) is choice.pick
    assert choice.compiled_pick(compiler, greedy, torch.float32, 4, large, CPU) is not choice.pick
    assert choice.compiles(torch.device("cuda"), greedy=False, vocab=64)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_compiled_choice_compiles_once_per_kind_not_per_temperature(monkeypatch):
    """Temperature and top_p are graph inputs: a sweep over them compiles once per kind of choice (nucleus or
    not), and every setting gives eager ``pick``'s tokens and log-probs. Compiled as on a GPU (``choice.compiles``)."""
    monkeypatch.setattr(choice, "compiles", lambda device, greedy, vocab: True)
    compiler, g = Compiler(CPU), torch.Generator().manual_seed(0)
    logits, u = torch.randn(4, 64, generator=g) * 3, torch.rand(4, 1, generator=g)
    for temperature, top_p in [(1.0, 1.0), (0.7, 1.0), (1.3, 1.0), (0.5, 0.9), (1.0, 0.8), (2.0, 0.95)]:
        settings = sampling.Settings(max_tokens=1, temperature=temperature, top_p=top_p, top_k=20)
        got = choice.compiled_pick(compiler, settings, torch.float32, 4, 64, CPU)(logits, u, temperature, top_p, 20)
        want = choice.pick(logits, u, temperature, top_p, 20)
        assert got[0].tolist() == want[0].tolist(), (temperature, top_p)
        torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=0)
    assert sorted(c["nucleus"] for c in compiler.compiles) == [False, True]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_sample_compiles_one_choice_graph_per_kind(monkeypatch):
    """A sample's first token is chosen from the prompt's last logits, a strided view, and the others from a
    decode step's: they must share one graph, or every kind of choice costs two and torch's default limit of 8
    (which only a first call lifts) sends the ninth to eager. Odd rows and top_k: graphs no other test made.
    Compiled as on a GPU (``choice.compiles``)."""
    monkeypatch.setattr(choice, "compiles", lambda device, greedy, vocab: True)
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    def graphs() -> int:
        return len(_debug_get_cache_entry_list(choice.choice.__code__))

    with rlnb.connect("local", model="tiny", device="cpu", compile=True, record=False) as s:
        before = graphs()
        for top_k in (13, 17):
            s.sample([list(b"ab=")], num_samples=3, max_tokens=4, seed=1, top_k=top_k).result(600)
        assert graphs() - before == 2
        assert [c["top_k"] for c in s.backend.config()["compiles"] if c["what"] == "token choice"] == [13, 17]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_more_shapes_than_torchs_default_limit_all_compile():
    """torch keeps 8 graphs per function by default and runs further shapes eager; a compiled step gets
    ``RECOMPILE_LIMIT``: ten batch sizes are ten graphs."""
    from torch._dynamo.utils import counters

    def step(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).softmax(-1)

    compiler = Compiler(CPU)
    before = counters["stats"]["unique_graphs"]
    for rows in range(1, 11):
        x = torch.randn(rows, 8)
        torch.testing.assert_close(compiler.wrap(step, "test step", "arch", batch=rows)(x), step(x))
    assert counters["stats"]["unique_graphs"] - before == 10
    assert [c["batch"] for c in compiler.compiles] == list(range(1, 11))


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_step_that_compiles_again_for_one_shape_keeps_the_limit_and_is_recorded_and_said():
    """A step whose graph reads a Python int that changes between calls (transformers' sliding-window cache did)
    compiles again for the same shape at every call: past torch's default of 8 it ran eager, the recompiles neither
    timed nor recorded. Each call keeps ``RECOMPILE_LIMIT``, and each recompile is kept in ``compiles``, said once."""
    from torch._dynamo.utils import counters

    def step(x: torch.Tensor, scale: int) -> torch.Tensor:
        return (x * scale).softmax(-1)

    compiler, x = Compiler(CPU), torch.randn(2, 8)
    call = compiler.wrap(step, "test step", "arch", batch=2)
    before = counters["stats"]["unique_graphs"]
    with pytest.warns(RuntimeWarning, match=r"the test step for \{'batch': 2, 'threads': \d+\} compiled again") as said:
        for scale in range(1, 11):
            torch.testing.assert_close(call(x, scale), step(x, scale))
        call(x, 3)  # a graph it has: nothing compiles
    assert counters["stats"]["unique_graphs"] - before == 10
    assert len(said) == 1
    assert [c.get("again", False) for c in compiler.compiles] == [False] + [True] * 9
    assert all(c["what"] == "test step" and c["batch"] == 2 and c["seconds"] >= 0 for c in compiler.compiles)
    assert all(c["threads"] == torch.get_num_threads() for c in compiler.compiles)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_new_thread_count_compiles_as_a_new_shape_does_recorded_not_warned(request):
    """torch's graphs are per thread count (a guard on it), which the thread policy may change between operations:
    the decode step compiled again, unrecorded. A count's first call is a first compile, kept with its ``threads``;
    a count seen before runs the graph it has."""
    from torch._dynamo.utils import counters

    def step(x: torch.Tensor) -> torch.Tensor:
        return (x * 3).softmax(-1)

    previous = torch.get_num_threads()
    request.addfinalizer(lambda: torch.set_num_threads(previous))
    compiler, x = Compiler(CPU), torch.randn(3, 8)
    call = compiler.wrap(step, "test step", "arch", batch=3)
    before = counters["stats"]["unique_graphs"]
    for threads in (1, 2, 1, 2):
        torch.set_num_threads(threads)
        torch.testing.assert_close(call(x), step(x))  # no warning: the suite's filter makes one an error
    assert counters["stats"]["unique_graphs"] - before == 2
    assert [(c["batch"], c["threads"], c.get("again")) for c in compiler.compiles] == [(3, 1, None), (3, 2, None)]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_after_torch_dynamo_reset_a_shape_compiles_as_a_new_one_not_again(request):
    """``torch._dynamo.reset()`` (a user's, a test's) drops every graph and dynamo's callbacks: a shape compiled before
    compiles as a new one, recorded without a warning, and a recompile after it is still told."""
    from torch._dynamo.utils import counters

    def step(x: torch.Tensor, scale: int) -> torch.Tensor:
        return (x * scale).log_softmax(-1)

    request.addfinalizer(torch._dynamo.reset)  # this test's frames go with it
    compiler, x = Compiler(CPU), torch.randn(5, 8)
    call = compiler.wrap(step, "test step", "arch", batch=5)
    call(x, 2)
    torch._dynamo.reset()
    before = counters["stats"]["unique_graphs"]
    torch.testing.assert_close(call(x, 2), step(x, 2))  # no warning: the suite's filter makes one an error
    with pytest.warns(RuntimeWarning, match="compiled again"):
        call(x, 3)
    assert counters["stats"]["unique_graphs"] - before == 2
    assert [c.get("again", False) for c in compiler.compiles] == [False, False, True]


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("kind", ["builtin", "hf lora"])
def test_a_compiled_session_samples_the_synced_weights_as_an_eager_one(kind, request):
    """Train, weights-sync, sample again: the compiled graphs read the new weights (full weights: re-packed;
    LoRA: the sampler's adapter), never ones baked in at compile time; a temperature change compiles nothing."""
    if kind == "builtin":
        kw = {"model": "tiny", "seed": 4}
    else:
        kw = {"model": request.getfixturevalue("hf_dirs")["llama"], "seed": 4, "lora": {"rank": 4}}
    runs = {}
    for compile_ in (False, True):
        # one thread count: a graph is per count, and the policy's may change after the training steps
        with rlnb.connect("local", device="cpu", record=False, compile=compile_, threads=1, **kw) as s:
            prompts = ["n=", "the loss"]
            before = s.sample(prompts, num_samples=2, max_tokens=12, seed=3).result()
            for _ in range(3):
                s.forward_backward([rlnb.samples.cross_entropy(s.encode("n=1+1=2, n=2+2=4"))])
                s.optim_step(rlnb.AdamParams(learning_rate=5e-2))
            s.weights_sync().result()
            after = s.sample(prompts, num_samples=2, max_tokens=12, seed=3, temperature=0.8).result()
            runs[compile_] = [[r.sequences for r in out.results] for out in (before, after)]
            if compile_:  # (none if an earlier test compiled these shapes in this process)
                whats = [c["what"] for c in s.backend.engine.compiler.compiles]
                assert whats.count("token choice") <= 1 and whats.count("decode step") <= 1
    for got, want in zip(runs[True], runs[False], strict=True):
        assert_same_samples(got, want)
    assert tokens_and_logprobs(runs[True][0])[0] != tokens_and_logprobs(runs[True][1])[0]  # training changed them


@pytest.mark.slow
def test_a_graph_torch_fails_to_compile_runs_eager_with_a_warning(monkeypatch, tmp_path, request):
    """torch 2.11's inductor failed to generate the CUDA scan of a 151,936-token vocabulary's token choice, and
    every sample of a compile=True session failed INTERNAL_ERROR (seen on an H200). A graph that does not compile
    now runs eager, said once and recorded: the sample goes on with the eager tokens. The choice compiled as on a
    GPU (``choice.compiles``)."""
    from rlnb.engine.models import compiled

    monkeypatch.setattr(choice, "compiles", lambda device, greedy, vocab: True)

    def broken(gm, example_inputs):
        raise TypeError("list indices must be integers or slices, not NoneType")  # what inductor raised there

    torch._dynamo.reset()  # dynamo keeps compiled frames per function: another test's graph of these shapes
    request.addfinalizer(torch._dynamo.reset)  # and the frames that failed here must not outlive the test
    monkeypatch.setattr(compiled, "_COMPILED", {})
    monkeypatch.setattr(compiled, "_SEEN", set())
    monkeypatch.setattr(compiled, "_EAGER", set())
    monkeypatch.setattr(compiled, "_compiled", lambda fn, device: torch.compile(fn, dynamic=False, backend=broken))
    kw = {"model": "tiny", "seed": 2, "device": "cpu", "runs_dir": tmp_path}
    with rlnb.connect("local", run_id="eager", **kw) as eager:
        want = eager.sample(["n=", "a"], num_samples=2, max_tokens=12, seed=7).result()
    with rlnb.connect("local", compile=True, run_id="compiled", **kw) as s:
        with pytest.warns(RuntimeWarning, match=r"compiling the (decode step|token choice) .* failed \(Backend"):
            got = s.sample(["n=", "a"], num_samples=2, max_tokens=12, seed=7).result()
        failed = list(s.backend.engine.compiler.compiles)
        again = s.sample(["n=", "a"], num_samples=2, max_tokens=12, seed=7).result()  # not tried again: no warning
        assert s.backend.engine.compiler.compiles == failed
    assert_same_samples([r.sequences for r in got.results], [r.sequences for r in want.results])
    assert_same_samples([r.sequences for r in again.results], [r.sequences for r in want.results])
    assert sorted(c["what"] for c in failed) == ["decode step", "token choice"]
    assert all("list indices must be integers" in c["error"] for c in failed)
    assert json.loads((tmp_path / "compiled" / "config.json").read_text())["compiles"] == failed


SLIDING = dict(use_sliding_window=True, sliding_window=8, max_window_layers=0, layer_types=["sliding_attention"] * 2)
"""A Qwen3 whose two layers attend over the last 8 tokens only, as Mistral's and Gemma's sliding layers do."""


@pytest.mark.slow
@pytest.mark.timeout(1500)  # one decode-step compile: minutes on a loaded 2-core machine
def test_a_compiled_sliding_window_model_decodes_every_token_with_one_graph(transformers, tmp_path):
    """transformers' ``StaticSlidingWindowLayer`` reads a Python int that grows by one a token: a compiled step of a
    sliding-window model compiled again at every token, past torch's limit, unrecorded. Its sliding layers now hold
    every slot, as the full-attention ones, and the mask slides: one graph for a 16-token sample whose 30-slot prompt
    and tokens run well past the 8-token window, one recorded compile, the eager tokens and log-probs to 1e-5."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    from rlnb.engine.models.decoders import hf_step
    from tests.support.hf_models import save

    folder = str(save("qwen3", tmp_path / "sliding", **SLIDING))
    prompts = [list(range(3, 23)), [5, 6], list(range(40, 70))]
    kw = {"model": folder, "seed": 0, "device": "cpu", "record": False}
    with rlnb.connect("local", **kw) as eager:
        want = eager.sample(prompts, num_samples=2, max_tokens=16, seed=3).result()
    with rlnb.connect("local", compile=True, **kw) as s:
        before = len(_debug_get_cache_entry_list(hf_step.__code__))
        got = s.sample(prompts, num_samples=2, max_tokens=16, seed=3).result(1400)  # a shape no other test makes
        graphs = len(_debug_get_cache_entry_list(hf_step.__code__)) - before
        steps = [c for c in s.backend.engine.compiler.compiles if c["what"] == "decode step"]
    assert max(len(q.tokens) for r in want.results for q in r.sequences) == 16  # no early stop
    assert graphs == 1
    assert [(c["batch"], c["length"], c["window"]) for c in steps] == [(6, 64, 64)]
    assert_same_samples([r.sequences for r in got.results], [r.sequences for r in want.results])


@pytest.mark.slow  # dynamo traces the step twice: seconds
def test_a_compile_that_fails_as_the_interpreter_exits_cancels_the_sample_and_is_no_compile_failure(
    monkeypatch, request
):
    """A Ctrl-C while a compile=True sample compiled: torch's exit hooks shut its compile workers down under the
    worker thread, and the sample warned ``compiling the decode step ... failed`` (false: the model compiles) and kept
    that in ``compiles``. Once the exit has begun the failure is the exit's: the sample is cancelled, nothing warned or
    recorded; outside an exit the same failure is the compiler's (warned, recorded, eager)."""
    from rlnb.engine.models import compiled
    from rlnb.errors import Cancelled
    from rlnb.lifecycle import shutdown

    def torn_down(gm, example_inputs):
        raise AttributeError("'_OpNamespace' 'prims' object has no attribute 'device_put'")  # met at a Ctrl-C

    def step(x):
        return x * 2 + 1

    torch._dynamo.reset()  # the frames that failed here must not outlive the test
    request.addfinalizer(torch._dynamo.reset)
    monkeypatch.setattr(compiled, "_COMPILED", {})
    monkeypatch.setattr(compiled, "_SEEN", set())
    monkeypatch.setattr(compiled, "_EAGER", set())
    monkeypatch.setattr(compiled, "_compiled", lambda fn, device: torch.compile(fn, dynamic=False, backend=torn_down))
    compiler, x = Compiler(CPU), torch.ones(2)
    call = compiler.wrap(step, "decode step", "arch", batch=2)
    monkeypatch.setattr(shutdown, "ending", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would raise, not the Cancelled
        with pytest.raises(Cancelled):
            call(x)
    assert compiler.compiles == [] and not compiled._EAGER
    monkeypatch.setattr(shutdown, "ending", lambda: False)
    with pytest.warns(RuntimeWarning, match=r"compiling the decode step .* failed \(BackendCompilerFailed"):
        assert torch.equal(call(x), step(x))
    assert [c["what"] for c in compiler.compiles] == ["decode step"] and "device_put" in compiler.compiles[0]["error"]
