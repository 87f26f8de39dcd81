"""A sweep over a model given as an ``nn.Module``: every trial starts from that module's weights."""

import torch
from torch import nn

import rlnb
from rlnb.sweep import sweep


class _Small(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(256, 16)
        self.hidden = nn.Linear(16, 16)
        self.head = nn.Linear(16, 256, bias=False)

    def forward(self, idx):
        return self.head(torch.tanh(self.hidden(self.emb(idx))))


def test_each_trial_trains_its_own_copy_of_a_module_given_as_model(tmp_path):
    """``sweep(..., model=module)`` gave every trial the one instance: two identical configs of one seed gave
    rewards 0.0493 and 0.0513 (the second began where the first ended), and the caller's module was trained."""
    module = _Small()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    same = {"learning_rate": 1e-2}  # a list repeats a config only under two variant names
    trials = sweep(rlnb.AdamParams(), [same, same], model=module, steps=2, runs_dir=tmp_path, executor="threads",
                   progress=False, device="cpu", threads=1, variants=["a", "b"])  # fmt: skip
    assert list(trials["status"]) == ["COMPLETED", "COMPLETED"]
    assert trials["final_reward"][0] == trials["final_reward"][1]
    assert trials["final_loss"][0] == trials["final_loss"][1]
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())  # the caller's module is as given


def test_lr_find_on_a_module_given_as_model_leaves_the_module_as_given(tmp_path):
    """Find LR trained the caller's ``model=`` module itself, up to rates that make it diverge ("nothing is
    applied anywhere", its docs say)."""
    from rlnb.sweep import lr_find

    module = _Small()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    found = lr_find(rlnb.AdamParams(), steps=5, model=module, runs_dir=tmp_path, device="cpu", threads=1)
    assert len(found.lrs) == 5  # it ran, on a copy
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())
