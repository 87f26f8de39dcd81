"""A remote session learns its model's limits from supported-models when it connects (one call), and refuses a
prompt whose max_tokens cannot fit, or a training sample past the trainer's length, before sending it, with the
in-process session's error. A server that does not say leaves the check to itself. Against the real app, in process."""

import logging

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

import rlnb
from rlnb import samples, wire
from rlnb.engine.models.tiny import TinyConfig, TinyTransformer
from rlnb.remote.start import ModelLimits, model_limits
from rlnb.text.prompts import check_room
from tests.support.fake_api import error
from tests.support.server import app_client

MODELS, SAMPLES = "/v1/rl/supported-models", "/v1/rl/training-sessions/{sid}/operations/sample"
PROMPTS = [  # rlnb/tiny and the in-process "tiny" both take 256 tokens
    (list(b"a" * 250), 7),  # 250 + 7 > 256
    (list(b"a" * 250), None),  # the default max_tokens (16) does not fit either
    (list(b"a" * 300), 1),  # longer than the context itself
]


class Relay:
    """An ``httpx.MockTransport`` handler that passes every request to the app behind ``c`` and records it;
    ``hide`` answers supported-models 404 (a server that does not serve it)."""

    def __init__(self, c: TestClient, hide: bool = False, default_max_tokens: int | None = None):
        self.c, self.hide, self.default_max_tokens = c, hide, default_max_tokens
        """``default_max_tokens``: what supported-models' answers say of it instead of the app's own."""
        self.sent: list[tuple[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.method, request.url.path))
        if self.hide and request.url.path == MODELS:
            return error(404, "not found")
        answer = self.c.request(request.method, str(request.url), content=request.read(), headers=request.headers)
        if self.default_max_tokens is not None and request.url.path == MODELS:
            listing = answer.json()
            for config in (c for m in listing["data"] for c in m["compute_configs"]):
                config["generator_config"]["sampling_defaults"]["max_tokens"] = self.default_max_tokens
            return httpx.Response(answer.status_code, json=listing)
        return httpx.Response(answer.status_code, headers=answer.headers.multi_items(), content=answer.content)

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))

    def count(self, method: str, path: str) -> int:
        return self.sent.count((method, path))


def refusals(s: rlnb.Session) -> list[str]:
    """The error of each of ``PROMPTS``, and of a training sample past the context."""
    said = []
    for prompt, max_tokens in PROMPTS:
        with pytest.raises(ValueError) as info:
            s.sample([prompt], max_tokens=max_tokens)
        said.append(str(info.value))
    with pytest.raises(ValueError) as info:
        s.forward_backward([samples.cross_entropy(list(b"b" * 300))])
    return [*said, str(info.value)]


@pytest.mark.slow  # a sample on the app's model and an in-process session (4 s on a loaded machine)
def test_a_prompt_past_the_remote_models_context_is_refused_before_sending_with_the_local_error(tmp_path):
    with app_client(tmp_path) as c:
        relay = Relay(c)
        with relay.client() as http, rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=http,
                                                  record=False) as s:  # fmt: skip
            remote = refusals(s)
            assert relay.count("GET", MODELS) == 1  # asked once, when it connected
            fits = s.sample([list(b"a" * 250)], max_tokens=6).result(60)  # 250 + 6 = 256: sent, and it runs
            assert len(fits.results[0].sequences[0].tokens) == 6
            sid = s.backend.session_id
            assert len(s.history) == 1  # the refused ones were never submitted
        assert relay.count("POST", SAMPLES.format(sid=sid)) == 1
        assert not [p for m, p in relay.sent if m == "POST" and p.endswith("/forward-backward")]
        assert relay.count("GET", MODELS) == 1
    with rlnb.connect("local", model="tiny", record=False) as local:
        assert refusals(local) == remote  # one rule, one message
    assert remote[0] == "prompts[0]: 250 tokens + max_tokens 7 exceed the model's context of 256"
    assert remote[1] == "prompts[0]: 250 tokens + max_tokens 16 (the default: max_tokens is unset) exceed the " \
                        "model's context of 256"  # fmt: skip


@pytest.mark.slow  # the app's model and a session on it (3 s on a loaded machine)
def test_an_unset_max_tokens_is_checked_against_the_default_the_server_lists(tmp_path):
    """The room of an unset ``max_tokens`` was rlnb's own default (16) whatever the server listed in its
    ``sampling_defaults``, the number the server itself samples: a server listing 100 was sent a 230-token prompt
    that could not fit its context of 256."""
    with app_client(tmp_path) as c:
        relay = Relay(c, default_max_tokens=100)
        with relay.client() as http, rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=http,
                                                  record=False) as s:  # fmt: skip
            assert s.backend.default_max_tokens == 100
            refusal = r"^prompts\[0\]: 230 tokens \+ max_tokens 100 \(the default: max_tokens is unset\) exceed "
            with pytest.raises(ValueError, match=refusal):
                s.sample([list(b"a" * 230)])
            sid = s.backend.session_id
        assert relay.count("POST", SAMPLES.format(sid=sid)) == 0


def test_a_default_the_server_does_not_agree_on_is_not_checked_but_the_context_still_is():
    """``default_max_tokens`` None (configs that disagree on it, or none listed): no room is guessed for an unset
    ``max_tokens``, and a prompt longer than the context itself is still refused."""
    check_room([list(b"a" * 250)], None, 256, default=None)  # the server's default may fit it: sent
    with pytest.raises(ValueError, match=r"^prompts\[0\] has 300 tokens, more than the model's context of 256$"):
        check_room([list(b"a" * 300)], None, 256, default=None)
    with pytest.raises(ValueError, match=r"^prompts\[0\]: 250 tokens \+ max_tokens 7 exceed"):
        check_room([list(b"a" * 250)], 7, 256, default=None)  # a max_tokens given is checked as ever


def test_a_server_that_does_not_say_leaves_the_check_to_itself_saying_so_at_debug_level_only(tmp_path, caplog):
    with app_client(tmp_path) as c:
        relay = Relay(c, hide=True)
        with (
            caplog.at_level(logging.DEBUG, logger="rlnb"),
            relay.client() as http,
            rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=http, record=False) as s,
        ):
            assert s.backend.context_length is None and s.backend.max_seq_length is None
            with pytest.raises(rlnb.OperationFailed, match="exceed the model's context of 256"):
                s.sample([list(b"a" * 250)], max_tokens=7).result(60)  # sent: the server refuses it
        assert relay.count("GET", MODELS) == 1  # asked once, not again for each sample
        said = [r for r in caplog.records if "no model limits" in r.getMessage()]
        assert [r.levelno for r in said] == [logging.DEBUG]
        assert all(r.levelno < logging.WARNING for r in caplog.records if r.name == "rlnb")


def config(gpu: str, context: int | None, full: int, lora: int | None, max_tokens: int = 16
           ) -> wire.SupportedComputeConfig:  # fmt: skip
    defaults = wire.SamplingDefaults(logprobs=1, max_tokens=max_tokens, n=1, temperature=1.0)
    generator = wire.GeneratorConfig(context_length=context, sampling_defaults=defaults) if context else None
    return wire.SupportedComputeConfig.model_validate({
        "gpu_type": gpu,
        "generator_config": generator,
        "trainer_config": wire.TrainerConfig(
            full=wire.FullTrainerConfig(max_batch_size=8, max_seq_length=full),
            lora=wire.LoraTrainerConfig(max_batch_size=8, max_rank=64, max_seq_length=lora) if lora else None,
        ),
    })  # fmt: skip


@pytest.mark.parametrize(
    ("gpu", "lora", "configs", "limits"),
    [
        ("B200-SXM", False, [config("B200-SXM", 4096, 2048, 1024)], ModelLimits(4096, 2048, 8, 16)),
        ("B200-SXM", True, [config("B200-SXM", 4096, 2048, 1024)], ModelLimits(4096, 1024, 8, 16)),
        ("B200-SXM", True, [config("B200-SXM", 4096, 2048, None)], ModelLimits(4096, default_max_tokens=16)),
        ("B200-SXM", False, [config("B200-SXM", None, 2048, None)], ModelLimits(None, 2048, 8)),  # no generator said
        ("H100-80GB", False, [config("B200-SXM", 4096, 2048, None)], ModelLimits(4096, 2048, 8, 16)),
        (None, False, [config("B200-SXM", 4096, 2048, None)] * 2, ModelLimits(4096, 2048, 8, 16)),  # they agree
        (None, False, [config("B200-SXM", 4096, 2048, None), config("B200-SXM", 8192, 2048, None)],
         ModelLimits(None, 2048, 8, 16)),  # they disagree on the context: not guessed
        (None, False, [config("B200-SXM", 4096, 2048, None), config("B200-SXM", 4096, 2048, None, max_tokens=100)],
         ModelLimits(4096, 2048, 8)),  # they disagree on the default max_tokens: not guessed either
    ],
)  # fmt: skip
def test_the_limits_are_the_resources_own_models_gpus_and_weights_and_never_a_guess(gpu, lora, configs, limits):
    listing = wire.SupportedModels(data=[
        wire.SupportedModel(base_model="other", default_gpu_type="B200-SXM",
                            compute_configs=[config("B200-SXM", 8, 8, 8)]),
        wire.SupportedModel(base_model="org/m", default_gpu_type="B200-SXM", compute_configs=configs),
    ])  # fmt: skip
    resource = wire.ModelResources.model_validate({
        "id": "mr-1", "base_model": "org/m", "compute_config": {"num_generator_replicas": 1, "gpu_type": gpu},
        "created_at": "2025-01-01T00:00:00Z", "created_by": "u", "inactive_timeout": 60, "lora_enabled": lora,
        "optimizer_config": {}, "status": "MODEL_RESOURCES_STATUS_READY", "updated_at": "2025-01-01T00:00:00Z",
    })  # fmt: skip
    assert model_limits(listing, resource) == limits
    assert model_limits(wire.SupportedModels(data=[]), resource) == ModelLimits()  # a model not listed


def test_a_module_served_from_python_lists_its_context_and_a_session_on_it_is_checked_against_it(tmp_path):
    """``create_app(models={name: module})``: supported-models was a 500 for it (a spec that is no name), which the
    remote session's connect now asks."""
    module = TinyTransformer(TinyConfig(vocab_size=64, block_size=32, n_layer=1, n_head=2, n_embd=16))
    with app_client(tmp_path, models={"x/mod": module}) as c:
        listed = c.get("/supported-models").json()["data"][0]["compute_configs"][0]
        assert listed["generator_config"]["context_length"] == 32
        relay = Relay(c)
        with relay.client() as http, rlnb.connect("http://testserver", base_model="x/mod", http_client=http,
                                                  record=False) as s:  # fmt: skip
            assert s.backend.context_length == 32
            refusal = r"^prompts\[0\]: 30 tokens \+ max_tokens 3 exceed the model's context of 32$"
            with pytest.raises(ValueError, match=refusal):
                s.sample([list(range(30))], max_tokens=3)


class Defaults(Relay):
    """Answers supported-models with each ``generator_config``'s ``sampling_defaults`` edited by ``edit``."""

    def __init__(self, c: TestClient, edit):
        super().__init__(c)
        self.edit = edit

    def __call__(self, request: httpx.Request) -> httpx.Response:
        answer = super().__call__(request)
        if request.url.path != MODELS:
            return answer
        listing = answer.json()
        for config in (c for m in listing["data"] for c in m["compute_configs"]):
            self.edit(config["generator_config"])
        return httpx.Response(answer.status_code, json=listing)


@pytest.mark.slow  # the app's model and a session on it
@pytest.mark.parametrize(
    "edit",
    [lambda g: g.pop("sampling_defaults"), lambda g: g["sampling_defaults"].update(max_tokens=None)],
    ids=["omitted", "max_tokens null"],
)
def test_a_listing_without_sampling_defaults_keeps_its_context_length(tmp_path, edit):
    """R-new requires ``sampling_defaults``, and rlnb's server always sends it; a server that omits it (or its
    ``max_tokens``) made the whole listing invalid, and every limit was dropped, the context too (review39e L5): a
    300-token prompt was sent and failed on the server. Now only the default is unknown."""
    with app_client(tmp_path) as c:
        relay = Defaults(c, edit)
        with relay.client() as http, rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=http,
                                                  record=False) as s:  # fmt: skip
            assert (s.backend.context_length, s.backend.default_max_tokens) == (256, None)
            with pytest.raises(ValueError, match=r"^prompts\[0\] has 300 tokens, more than the model's context"):
                s.sample([list(b"a" * 300)], max_tokens=5)
            sid = s.backend.session_id
        assert relay.count("POST", SAMPLES.format(sid=sid)) == 0


def test_sampling_defaults_stay_required_outside_a_servers_answer():
    """Only what a server answers (``FROM_SERVER``) may lack ``sampling_defaults``: rlnb's own listing, and the
    published schema, still require them."""
    for listed in ({"context_length": 256}, {"context_length": 256, "sampling_defaults": None}):
        with pytest.raises(ValidationError, match="sampling_defaults"):
            wire.GeneratorConfig.model_validate(listed)
        assert wire.GeneratorConfig.model_validate(listed, context=wire.FROM_SERVER).sampling_defaults is None
    schema = wire.GeneratorConfig.model_json_schema(mode="serialization")
    assert "sampling_defaults" in schema["required"] and "anyOf" not in schema["properties"]["sampling_defaults"]
