"""LocalBackend's options: flat keywords (``rlnb.connect("local", seed=1, ...)``) and the groups they fill
(``ModelOptions``, ``MuonOptions``, ``CheckpointOptions``, ``ComputeOptions``) are the same settings, checked before
a model loads."""

import pytest

import rlnb
from rlnb.engine.backend import LocalBackend
from rlnb.engine.options import CheckpointOptions, ComputeOptions, ModelOptions, MuonOptions


@pytest.mark.parametrize(
    "options, error, match",
    [
        ({"muon_scaling": "spectral"}, ValueError, "muon_scaling must be 'original' or 'match_adam'"),
        ({"lora": "yes"}, ValueError, "lora"),
        ({"seeed": 1}, TypeError, "unexpected keyword argument.*seeed"),
        ({"threads": 0}, ValueError, "threads must be None .* or an integer >= 1 and <= 1024, got 0"),
        ({"threads": 10**6}, ValueError, "threads must be None .* <= 1024, got 1000000"),
        ({"threads": 2**63}, ValueError, "threads must be None .* <= 1024, got 9223372036854775808"),
        ({"compile": "yes"}, ValueError, "compile must be True or False"),
    ],
)
def test_bad_options_are_refused_before_the_model_loads(options, error, match):
    """``model`` names nothing that exists: had it been loaded first, that would be the error."""
    with pytest.raises(error, match=match):
        LocalBackend("muon", "/no/such/model/folder", **options)


def test_groups_and_flat_keywords_are_the_same_settings(tmp_path):
    backend = LocalBackend(
        "muon",
        "tiny",
        model_options=ModelOptions(seed=3, device="cpu", num_generator_replicas=0),
        muon_options=MuonOptions(muon_scaling="match_adam", ns_dtype="float32"),
        checkpoint_options=CheckpointOptions(checkpoint_dir=tmp_path / "ckpt"),
        compute_options=ComputeOptions(threads=2),
        seed=4,  # a field by name wins over its group's
        threads=1,
    )
    try:
        config = backend.config()
        assert config["seed"] == 4 and config["device"] == "cpu"
        assert config["muon_scaling"] == "match_adam" and config["ns_dtype"] == "float32"
        assert backend.engine.num_generator_replicas == 0
        assert (config["threads"], config["thread_policy"], config["compile"]) == (1, "fixed", False)
        twin = LocalBackend("muon", "tiny", seed=4, device="cpu", muon_scaling="match_adam", ns_dtype="float32")
        same = all(p.equal(q) for p, q in zip(backend.trainer.parameters(), twin.trainer.parameters(), strict=True))
        assert same  # the same seed by either road builds the same weights
        twin.close()
        with rlnb.Session(backend, record=False) as s:
            ckpt = s.save_training_checkpoint().result(timeout=60)
        assert backend.checkpoint_path(ckpt.checkpoint.id).parent == tmp_path / "ckpt"
    finally:
        backend.close()
