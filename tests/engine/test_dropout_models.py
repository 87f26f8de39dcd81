"""Base-model randomness off: every kind of dropout and stochastic depth, found by type or by name, and a model that
stays random in train mode refused naming the module (``rlnb/engine/models/dropout.py``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rlnb.engine.models.dropout import check_deterministic, disable_dropout
from rlnb.engine.models.hf import ModelLoadError

D, VOCAB = 8, 32


class Reshaped(nn.Module):
    """``layer`` applied to ``[batch, time, *shape]`` (the channel dropouts want 3-5 dims)."""

    def __init__(self, layer: nn.Module, *shape: int) -> None:
        super().__init__()
        self.layer, self.shape = layer, shape

    def forward(self, x):
        return self.layer(x.reshape(*x.shape[:2], *self.shape)).reshape(x.shape)


class DropPath(nn.Module):
    """timm's stochastic depth: a whole residual branch dropped per sample, its rate ``drop_prob``."""

    def __init__(self, drop_prob: float) -> None:
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        if not self.training or self.drop_prob == 0.0:
            return x
        keep = x.new_empty(x.shape[0], 1, 1).bernoulli_(1 - self.drop_prob)
        return x * keep / (1 - self.drop_prob)


class StochasticDepth(nn.Module):
    """torchvision's: its rate is ``p``, its class name says what it is."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        return x * torch.empty(x.shape[0], 1, 1).bernoulli_(1 - self.p) / (1 - self.p)


class Functional(nn.Module):
    """A rate copied from a config at build time and passed to ``F.dropout`` (Llama's ``attention_dropout``)."""

    def __init__(self, **rate: float) -> None:
        super().__init__()
        ((self.name, value),) = rate.items()
        setattr(self, self.name, value)

    def forward(self, x):
        return F.dropout(x, getattr(self, self.name), self.training)


class LayerDrop(nn.Module):
    """OPT's ``layerdrop``: a whole layer skipped at random in training."""

    def __init__(self, layerdrop: float) -> None:
        super().__init__()
        self.layerdrop, self.inner = layerdrop, nn.Linear(D, D)

    def forward(self, x):
        return x if self.training and torch.rand(()) < self.layerdrop else self.inner(x)


class Residual(nn.Module):
    def __init__(self, branch: nn.Module) -> None:
        super().__init__()
        self.branch = branch

    def forward(self, x):
        return x + self.branch(x)


KINDS = {
    "Dropout": lambda: nn.Dropout(0.5),
    "Dropout1d": lambda: nn.Dropout1d(0.5),
    "Dropout2d": lambda: Reshaped(nn.Dropout2d(0.5), 2, 4),
    "Dropout3d": lambda: Reshaped(nn.Dropout3d(0.5), 2, 2, 2),
    "AlphaDropout": lambda: nn.AlphaDropout(0.5),
    "FeatureAlphaDropout": lambda: nn.FeatureAlphaDropout(0.5),
    "DropPath": lambda: Residual(DropPath(0.5)),
    "StochasticDepth": lambda: Residual(StochasticDepth(0.5)),
    "attention_dropout": lambda: Functional(attention_dropout=0.5),
    "resid_pdrop": lambda: Functional(resid_pdrop=0.5),
    "drop_rate": lambda: Functional(drop_rate=0.5),
    "drop_connect_rate": lambda: Functional(drop_connect_rate=0.5),
    "stochastic_depth_prob": lambda: Functional(stochastic_depth_prob=0.5),
    "layerdrop": lambda: LayerDrop(0.5),
}


def lm(*layers: nn.Module) -> nn.Module:
    return nn.Sequential(nn.Embedding(VOCAB, D), *layers, nn.Linear(D, VOCAB))


def forward(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(ids)


def train_logprobs(model: nn.Module, ids: torch.Tensor, seed: int) -> torch.Tensor:
    model.train()
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        return torch.log_softmax(model(ids), -1)


IDS = torch.arange(64).reshape(16, 4) % VOCAB


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_dropout_is_off_and_two_train_forwards_agree(kind):
    """Only ``nn.Dropout`` and float attributes named ``*dropout*`` were turned off: the channel and alpha dropouts,
    stochastic depth, ``*pdrop``, ``drop_rate`` and ``layerdrop`` kept the trainer's log-probs random."""
    torch.manual_seed(0)
    model = lm(*(KINDS[kind]() for _ in range(6)))
    assert not torch.equal(train_logprobs(model, IDS, 1), train_logprobs(model, IDS, 2))  # random before
    zeroed = disable_dropout(model)
    assert len(zeroed) == 6
    first = train_logprobs(model, IDS, 1)
    rng = torch.random.get_rng_state()
    assert torch.equal(first, train_logprobs(model, IDS, 2))
    assert torch.equal(torch.random.get_rng_state(), rng)  # nothing drawn from the global RNG
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(torch.log_softmax(model(IDS), -1), first)  # the sampler's (eval) log-probs
    check_deterministic(model, forward, IDS, "custom")  # and the check at connect takes it


def test_integer_and_boolean_attributes_named_like_rates_are_left_alone():
    model = lm(Functional(dropout=0.5))
    model[1].dropout_layers, model[1].use_dropout, model[1].drop_path_rate = 3, True, 0.0
    assert disable_dropout(model) == ["1.dropout"]
    assert (model[1].dropout_layers, model[1].use_dropout, model[1].dropout) == (3, True, 0.0)


class TextConfig:
    def __init__(self, **fields: float) -> None:
        self.__dict__.update(fields)


class ReadsItsConfig(nn.Module):
    """A layer that reads its rate from a sub-config when it runs (a multimodal model's ``text_config``)."""

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config

    def forward(self, x):
        return F.dropout(x, self.config.text_config.attention_dropout, self.training)


def test_rates_read_from_a_config_or_its_sub_configs_when_a_layer_runs_are_zeroed():
    """Only the model's own ``config`` was zeroed, and only six names on it."""
    torch.manual_seed(0)
    config = TextConfig(text_config=TextConfig(attention_dropout=0.5, hidden_size=8.0))
    model = lm(*(ReadsItsConfig(config) for _ in range(4)))
    assert not torch.equal(train_logprobs(model, IDS, 1), train_logprobs(model, IDS, 2))
    assert disable_dropout(model) == ["1.config.text_config.attention_dropout"]  # one config, shared: zeroed once
    assert torch.equal(train_logprobs(model, IDS, 1), train_logprobs(model, IDS, 2))
    assert config.text_config.hidden_size == 8.0


class HiddenRate(nn.Module):
    """A rate under a name no one could guess, passed to ``F.dropout``."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.keep = nn.Linear(D, D), 0.5

    def forward(self, x):
        return F.dropout(self.proj(x), 1 - self.keep, self.training)


def test_randomness_no_name_gives_away_is_refused_naming_its_module():
    model = lm(nn.Linear(D, D), Residual(HiddenRate()), nn.Dropout(0.5))
    disable_dropout(model)
    with pytest.raises(
        ModelLoadError,
        match=r"model 'custom' is random in train mode .*: 2\.branch \(HiddenRate\) "
        r"gave other outputs for the same input.*set that rate to 0",
    ):
        check_deterministic(model, forward, IDS, "custom")
    assert model.training  # its mode is as it was
    with pytest.raises(ModelLoadError, match=r"2\.branch \(HiddenRate\)"):
        check_deterministic(model.eval(), forward, IDS, "custom")  # in train mode, whatever the mode given
    assert not model.training
    model[2].branch.keep = 1.0
    check_deterministic(model.train(), forward, IDS, "custom")


class UnseededNoise(nn.Module):
    """A kernel that is not deterministic (atomics on a GPU): its output changes from call to call by float noise
    (past ``allclose``'s tolerance, far under a dropped activation), under any seed."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.calls = nn.Linear(D, D), 0

    def forward(self, x):
        self.calls += 1
        return self.proj(x) * (1 + 1e-3 * self.calls)


def test_a_model_whose_outputs_change_under_one_seed_too_is_not_refused():
    """Randomness of the model's own draws repeats under the same seed; a kernel's that are not deterministic do not,
    and refusing them left a user's model, on a GPU, with no way to be used."""
    model = lm(UnseededNoise())
    disable_dropout(model)
    check_deterministic(model, forward, IDS, "custom")
    assert model[1].calls == 3  # seed 1, seed 2, and seed 1 again, which did not repeat its first answer


class OwnGenerator(nn.Module):
    """Dropout drawn from a ``torch.Generator`` of the module's own: seeding torch's global RNGs does not repeat it."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.generator = nn.Linear(D, D), torch.Generator().manual_seed(0)

    def forward(self, x):
        keep = torch.rand(x.shape, generator=self.generator) > 0.5
        return self.proj(x) * keep * 2


def test_a_model_drawing_from_a_generator_of_its_own_is_refused_naming_the_module():
    """Seed 1 run again did not repeat its answer, which was taken for a kernel's float noise: the model was
    accepted, its dropout on."""
    model = lm(nn.Linear(D, D), OwnGenerator())
    disable_dropout(model)
    with pytest.raises(ModelLoadError, match=r"2 \(OwnGenerator\) gave other outputs for the same input"):
        check_deterministic(model, forward, IDS, "custom")


def test_seeded_dropout_beside_a_kernels_float_noise_is_refused():
    """A hidden rate on torch's RNG in a model whose kernels are not deterministic: seed 1 did not repeat (by float
    noise), and the seeds' far larger difference was accepted with it."""
    model = lm(UnseededNoise(), Residual(HiddenRate()))
    disable_dropout(model)
    with pytest.raises(ModelLoadError, match=r"random in train mode .*: 2\.branch\b"):  # the noise blurs which
        check_deterministic(model, forward, IDS, "custom")  # module inside it


class Normed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(D)

    def forward(self, x):
        return self.norm(x.reshape(-1, D)).reshape(x.shape)


def test_the_probe_leaves_batch_norm_running_statistics_as_they_were():
    """Each train-mode probe forward moved the running mean and variance the eval-mode sampler normalizes with."""
    model = lm(Normed())
    before = {k: v.clone() for k, v in model[1].norm.named_buffers()}
    check_deterministic(model, forward, IDS, "custom")
    for key, value in model[1].norm.named_buffers():
        assert torch.equal(value, before[key]), key
