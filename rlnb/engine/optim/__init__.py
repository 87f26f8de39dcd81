"""The optimizer step: AdamW and Muon (``muon``: Newton–Schulz), which weights each one gets (``split``),
and ``TrainerOptimizer`` (``trainer``: clipping, non-finite checks, the step's metrics; ``norms``: the gradient
norm and clip factor it shares with a batched run)."""
