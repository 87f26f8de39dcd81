"""Batched trials: many RL runs of one built-in model that differ only in hyperparameters and seed,
trained as one stacked ensemble (``run_batched``), each still a full run with its own History."""

from rlnb.batched.members import SEED_STRIDE, Member, MemberResult
from rlnb.batched.run import BATCHABLE_OPTIONS, run_batched, why_not_batched

__all__ = ["BATCHABLE_OPTIONS", "SEED_STRIDE", "Member", "MemberResult", "run_batched", "why_not_batched"]
