"""The in-process torch engine: ``LocalBackend`` (``rlnb.engine.backend``) runs a session's operations
on a worker thread, with the models (``models/``), the optimizers (``optim/``), the losses and the sampler.

Nothing is imported here, so that ``rlnb.engine.worker`` (torch-free) loads without torch.
"""
