"""Bigram: a tiny torch model whose maths is easy to replay by hand, for the in-process backend's tests."""

import torch
from torch import nn

VOCAB = 32


class Bigram(nn.Module):
    """A tiny model whose maths is easy to replay by hand. ``poison`` makes the gradient NaN while
    the loss stays finite (d/dw of 0·sqrt(w - w) is 0·inf)."""

    def __init__(self, vocab: int = VOCAB, dim: int = 8):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(vocab, dim)
        self.hidden = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.poison = False

    def forward(self, idx):
        x = self.head(torch.tanh(self.hidden(self.emb(idx))))
        if self.poison:
            w = self.hidden.weight
            x = x + 0 * torch.sqrt(w - w.detach()).sum()
        return x
