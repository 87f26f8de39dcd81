"""``ServerSettings`` checks what it serves, as ``rlnb serve`` did alone: ``create_app(ServerSettings(...))`` took a
dtype no model loads in and a model no loader finds, then answered every session ERROR and supported-models a 500."""

import pytest

from rlnb.engine.models.hf import ModelLoadError
from rlnb.server import models as models_module
from rlnb.server.settings import ServerSettings
from tests.support.server import app_client, new_session


def test_a_dtype_no_model_loads_in_is_refused_naming_dtype_and_the_choices():
    with pytest.raises(ValueError, match=r"^dtype must be one of auto, float32, bfloat16, float16, got 'float64'$"):
        ServerSettings(device="cpu", dtype="float64")
    assert ServerSettings(device="cpu", dtype="float16").dtype == "float16"


def test_a_served_model_that_cannot_be_found_is_refused_naming_its_entry():
    with pytest.raises(ValueError, match=r"^models\['m/bad'\]: model 'tinyy' is not a local directory"):
        ServerSettings(device="cpu", models={"rlnb/tiny": "tiny", "m/bad": "tinyy"})
    with pytest.raises(ValueError, match=r"^models\['m/odd'\]: a served model is a built-in size"):
        ServerSettings(device="cpu", models={"m/odd": 3})


def test_a_model_that_went_missing_after_the_start_leaves_the_others_listed(tmp_path, monkeypatch, caplog):
    """A folder removed once the server runs: supported-models was a 500 for every model, the built-ins too."""
    read = models_module.model_info

    def gone(spec, trust_remote_code=False):
        if spec == "small":
            raise ModelLoadError("model 'small': its folder is gone")
        return read(spec, trust_remote_code)

    with app_client(tmp_path) as c:
        monkeypatch.setattr(models_module, "model_info", gone)
        listed = c.get("/supported-models")
    assert listed.status_code == 200, listed.text
    assert [m["base_model"] for m in listed.json()["data"]] == ["rlnb/tiny"]
    assert "rlnb/small" in caplog.text and "its folder is gone" in caplog.text


@pytest.mark.parametrize("bad", [0, 1025, True, 2.0, "2"])
def test_a_thread_count_out_of_range_is_refused_naming_threads_and_its_range(bad):
    with pytest.raises(ValueError, match=r"^threads must be None \(the engine's thread policy decides\) or an integer "
                       rf">= 1 and <= 1024, got {bad!r}$"):  # fmt: skip
        ServerSettings(device="cpu", threads=bad)


@pytest.mark.slow  # builds a session's model
def test_each_sessions_engine_runs_the_servers_thread_count(tmp_path):
    """review42d: ``rlnb serve`` had no thread count, so a remote run's log-probs drifted from an in-process one's
    after training (6.1e-4 after two steps) with nothing to fix it. ``threads=N`` (``--threads N``) is each session's
    engine's fixed count, as ``rlnb.connect(..., threads=N)``'s, and its config says so, as a local session's."""
    for threads, policy in ((1, "fixed"), (None, "auto")):
        with app_client(tmp_path, threads=threads) as c:
            _, sid = new_session(c)
            config = c.app.state.registry.sessions[sid].backend.config()
        assert config["thread_policy"] == policy
        if threads is not None:
            assert config["threads"] == threads
