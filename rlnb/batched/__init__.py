"""Batched trials: many RL runs of one built-in model that differ only in hyperparameters and seed,
trained as one stacked ensemble (``run_batched``), each still a full run with its own History."""

from rlnb.batched.members import Member, MemberResult
from rlnb.batched.run import BATCHABLE_OPTIONS, SEED_STRIDE, run_batched, why_not_batched

__all__ = ["BATCHABLE_OPTIONS", "SEED_STRIDE", "Member", "MemberResult", "run_batched", "why_not_batched"]
