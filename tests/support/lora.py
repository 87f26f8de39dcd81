"""LoRA options that `rlnb.connect` refuses, with the message each gets: the same locally and remotely."""

BAD_LORA = [
    ("rank=8", r"lora must be True, False, None or a dict with keys rank, alpha, dropout, seed, train_unembed; "
               "got 'rank=8'"),
    (8, r"lora must be True, False, None or a dict"),
    ({"rnk": 8}, r"lora has unknown keys \['rnk'\]; allowed: rank, alpha"),
    ({"rank": 0}, r"lora rank: .*greater than or equal to 1, got 0"),
]  # fmt: skip
