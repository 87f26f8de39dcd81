"""The Muon / AdamW split decides by role, never by registration order; the Newton-Schulz dtype is the
same in every process on a machine."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

import rlnb
from rlnb import samples
from rlnb.engine.models.adapter import ModelAdapter
from rlnb.engine.optim import muon
from rlnb.engine.optim.split import split_params
from rlnb.text.codec import ByteCodec

V, D = 40, 16


class HeadFirst(nn.Module):
    """Registers its output head before the hidden layers, and holds the embedding as a bare Parameter."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.head = nn.Linear(D, V, bias=False)
        self.table = nn.Parameter(torch.randn(V, D) * 0.1)  # the token embedding, not an nn.Embedding
        self.hidden = nn.Linear(D, D)
        self.value_head = nn.Linear(D, 1)  # a critic registered after the LM head

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.hidden(self.table[idx]))
        return self.head(h) + 0 * self.value_head(h)


def groups(split) -> tuple[set[str], set[str]]:
    return {n for n, _ in split.muon}, {n for n, _ in split.adam}


def test_roles_of_a_plain_module_are_found_by_their_gradients():
    model = HeadFirst()
    roles = ModelAdapter(model, "custom", ByteCodec(), torch.device("cpu")).embedding_params()
    assert {id(p) for p in roles} == {id(model.head.weight), id(model.table)}
    muon_names, adam_names = groups(split_params(model, roles))
    assert muon_names == {"hidden.weight"}
    assert {"head.weight", "table", "value_head.weight", "hidden.bias"} <= adam_names
    # the order parameters are listed in does not matter
    assert groups(split_params(model, list(reversed(roles)))) == (muon_names, adam_names)


def test_a_session_on_that_module_uses_the_role_split_and_records_it():
    with rlnb.connect("local", optimizer="muon", model=HeadFirst(), device="cpu") as s:
        assert s.history.config["param_split"]["muon"] == ["hidden.weight"]
        s.forward_backward([samples.cross_entropy([1, 2, 3, 4])])
        assert s.optim_step().result().metrics["grad_norm/muon"] > 0


def test_tied_embedding_and_head_are_one_adam_parameter():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(V, D)
            self.mid = nn.Linear(D, D)
            self.out = nn.Linear(D, V, bias=False)
            self.out.weight = self.emb.weight

        def forward(self, idx):
            return self.out(self.mid(self.emb(idx)))

        def get_input_embeddings(self):
            return self.emb

        def get_output_embeddings(self):
            return self.out

    muon_names, adam_names = groups(split_params(Tied()))
    assert muon_names == {"mid.weight"} and "emb.weight" in adam_names


def test_override_by_pattern_or_predicate():
    model = HeadFirst()
    roles = [model.head.weight, model.table]
    pinned = split_params(model, roles, {"value_head.weight": "muon", "hidden.weight": "adam"})
    assert groups(pinned)[0] == {"value_head.weight"}
    pred = split_params(model, roles, lambda name, p: "adam" if name.startswith("hidden") else None)
    assert groups(pred)[0] == set()
    with pytest.raises(ValueError, match="hidden.bias .*2-D matrices only"):
        split_params(model, roles, {"hidden.bias": "muon"})
    with pytest.raises(ValueError, match="'muon', 'adam' or None; got 'sgd'"):
        split_params(model, roles, {"*": "sgd"})
    with rlnb.connect("local", optimizer="muon", model=HeadFirst(), device="cpu", muon_split={"*": "adam"}) as s:
        assert s.backend.optim.split.muon == []


def test_a_pattern_that_matches_no_trainable_parameter_is_refused_naming_it():
    """``muon_split={"zzz*": "adam"}`` was taken, and a misspelt pattern changed nothing, in silence."""
    model = HeadFirst()
    words = (
        r"^muon_split pattern 'hiden\.\*' matches no trainable parameter of the model; its names are like "
        r"table, head\.weight, hidden\.weight, hidden\.bias, \.\.\. \(6 in all\)$"
    )
    with pytest.raises(ValueError, match=words):
        split_params(model, [model.head.weight, model.table], {"hidden.*": "adam", "hiden.*": "adam"})
    model.hidden.requires_grad_(False)  # frozen: in neither group, so a pattern for it alone does nothing
    with pytest.raises(ValueError, match="pattern 'hidden.weight' matches no trainable parameter"):
        split_params(model, [model.head.weight, model.table], {"hidden.weight": "adam"})
    with pytest.raises(ValueError, match="pattern 'zzz\\*' matches no trainable parameter .* like wte.weight, "):
        rlnb.connect("local", optimizer="muon", model="tiny", device="cpu", record=False, muon_split={"zzz*": "adam"})


def test_lora_factors_share_their_layers_group(peft):
    with rlnb.connect("local", optimizer="muon", model="tiny", lora={"rank": 2}, device="cpu") as s:
        muon_names, adam_names = groups(s.backend.optim.split)
    assert muon_names and adam_names
    for names, expected in ((muon_names, "muon"), (adam_names, "adam")):
        for name in names:
            twin = name.replace("lora_A", "lora_B") if "lora_A" in name else name.replace("lora_B", "lora_A")
            assert twin in (muon_names if expected == "muon" else adam_names), name
    assert all("lm_head" in n for n in adam_names)  # train_unembed: the head's factors go to AdamW
    assert all("lora_" in n for n in muon_names | adam_names)  # the base is frozen: in neither group


class Adapted(nn.Module):
    """A layer as peft wraps it (``base_layer`` frozen, ``lora_A`` / ``lora_B`` trainable) at a given rank,
    beside a head whose factors follow the head's role."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.hidden = nn.Module()
        self.hidden.base_layer = nn.Linear(D, 3 * D, bias=False).requires_grad_(False)
        self.hidden.lora_A = nn.ModuleDict({"default": nn.Linear(D, rank, bias=False)})
        self.hidden.lora_B = nn.ModuleDict({"default": nn.Linear(rank, 3 * D, bias=False)})
        self.head = nn.Linear(D, V, bias=False)


@pytest.mark.parametrize("rank", [1, 2, 4])
def test_a_lora_factor_goes_to_muon_only_if_it_is_itself_a_matrix(rank):
    """Rank 1 makes both factors vectors ([1, in] and [out, 1]): Newton-Schulz would only normalise them,
    so they go to AdamW like any weight with a side of 1; from rank 2 they share their base's group."""
    model = Adapted(rank)
    muon_names, adam_names = groups(split_params(model, [model.head.weight]))
    factors = {"hidden.lora_A.default.weight", "hidden.lora_B.default.weight"}
    assert muon_names == (set() if rank == 1 else factors)
    assert adam_names == {"head.weight"} | (factors if rank == 1 else set())


def test_a_rank_1_lora_session_steps_every_factor_with_adamw_and_says_so(peft):
    with pytest.warns(UserWarning, match="no trainable weight of this model is a hidden matrix: Muon moves nothing"):
        s = rlnb.connect("local", optimizer="muon", model="tiny", lora={"rank": 1}, device="cpu", record=False)
    with s:
        muon_names, adam_names = groups(s.backend.optim.split)
        assert not muon_names
        assert {n for n, p in s.backend.trainer.named_parameters() if p.requires_grad} == adam_names
        assert adam_names and all("lora_" in n for n in adam_names)  # the base is frozen: in neither group
        s.forward_backward([samples.cross_entropy([1, 2, 3, 4])])
        assert s.optim_step().result().metrics["grad_norm/adam"] > 0


@pytest.mark.slow  # seven Python processes that import torch
def test_ns_dtype_is_the_same_in_every_process_and_follows_the_cpu_capability():
    probe = "import torch; from rlnb.engine.optim.muon import ns_dtype_for; print(ns_dtype_for(torch.device('cpu')))"
    seen = {
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
        for _ in range(6)
    }
    assert seen == {f"{muon.ns_dtype_for(torch.device('cpu'))}\n"}
    capped = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, "ATEN_CPU_CAPABILITY": "avx2"},
    ).stdout
    assert capped == "torch.float32\n"


def test_ns_dtype_override_is_recorded_and_resume_reuses_it(tmp_path):
    with rlnb.connect("local", optimizer="muon", ns_dtype="float32", checkpoint_dir=tmp_path, device="cpu") as s:
        assert s.backend.optim.ns_dtype == torch.float32 and s.history.config["ns_dtype"] == "float32"
        ckpt = s.save_training_checkpoint().result().checkpoint
        path = s.backend.checkpoint_path(ckpt.id)
    assert torch.load(path, weights_only=True)["ns_dtype"] == "float32"
    with rlnb.connect("local", optimizer="muon", resume_from=path, device="cpu") as r:
        assert r.backend.optim.ns_dtype == torch.float32
    with rlnb.connect("local", optimizer="muon", resume_from=path, ns_dtype="bfloat16", device="cpu") as r:
        assert r.backend.optim.ns_dtype == torch.bfloat16  # an explicit choice wins
    with pytest.raises(ValueError, match="ns_dtype must be one of"):
        rlnb.connect("local", optimizer="muon", ns_dtype="fp8", device="cpu")


class Block(nn.Module):
    """Attention with separate q/k/v/o layers and an MLP, each as wide as a byte vocabulary at ``d`` = 256."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, t = self.ln1(x), x.shape[1]
        att = (self.q(h) @ self.k(h).transpose(1, 2)) / h.shape[-1] ** 0.5
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        x = x + self.o(att @ self.v(h))
        return x + self.proj(torch.relu(self.fc(self.ln2(x))))


class ByteGPT(nn.Module):
    """A byte-level GPT (vocabulary 256) of width ``d``, its positions a bare Parameter table of 64 rows."""

    def __init__(self, d: int = 256, zero_head: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.tok, self.pos = nn.Embedding(256, d), nn.Parameter(torch.randn(64, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d) for _ in range(2))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, 256, bias=False)
        if zero_head:  # as modded-nanogpt's Muon speedruns: no gradient reaches anything before the head at first
            nn.init.zeros_(self.head.weight)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


HIDDEN = {f"blocks.{i}.{layer}.weight" for i in range(2) for layer in ("q", "k", "v", "o", "fc", "proj")}


@pytest.mark.parametrize("zero_head", [False, True], ids=["random head", "zero head"])
def test_a_module_as_wide_as_its_vocabulary_keeps_its_hidden_matrices_in_muon(zero_head):
    """At width 256 = the byte vocabulary every hidden matrix was a candidate, and q/k (whose one-token gradient is
    exactly 0: softmax over one position) went to AdamW; with a zero head every matrix's gradient was 0 and the whole
    model was AdamW's, in silence. The bare position table, never probed, went to Muon."""
    model = ByteGPT(zero_head=zero_head)
    state = torch.get_rng_state()
    roles = ModelAdapter(model, "custom", ByteCodec(), torch.device("cpu")).embedding_params()
    assert torch.equal(torch.get_rng_state(), state)  # the stand-ins are drawn from a generator of their own
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)] for p in roles} == {"tok.weight", "pos", "head.weight"}
    muon_names, adam_names = groups(split_params(model, roles))
    assert muon_names == HIDDEN
    assert {"tok.weight", "pos", "head.weight"} <= adam_names
    assert not model.head.weight.any() if zero_head else model.head.weight.any()  # the probe changed no weight


def test_a_muon_session_with_no_muon_matrix_warns_naming_muon_split():
    class Lookup(nn.Module):  # an embedding and a head: nothing for Muon
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.head = nn.Embedding(V, D), nn.Linear(D, V)

        def forward(self, idx):
            return self.head(self.emb(idx))

    words = r"no trainable weight of this model is a hidden matrix: Muon moves nothing.*muon_split"
    with pytest.warns(UserWarning, match=words) as seen, rlnb.connect("local", optimizer="muon", model=Lookup(),
                                                                     device="cpu", record=False) as s:  # fmt: skip
        assert s.backend.optim.split.muon == []
    assert len(seen) == 1
    chosen = {"*": "adam"}  # chosen by hand: nothing to tell
    with rlnb.connect("local", optimizer="muon", model=Lookup(), device="cpu", record=False, muon_split=chosen) as s:
        assert s.backend.optim.split.muon == []
