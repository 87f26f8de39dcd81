"""What the sampler holds: the weights the last weights-sync published, and no copy where nothing samples."""

import rlnb
from rlnb import samples


def test_a_trainer_only_session_holds_no_sampler_copy_and_still_syncs():
    """With 0 generator replicas every sample is refused, yet the session kept a second full copy of the model for
    the sampler: twice the memory of a model it never sampled from."""
    with rlnb.connect("local", model="tiny", device="cpu", record=False, num_generator_replicas=0) as s:
        trainer, sampler = s.backend.trainer, s.backend.sampler
        assert all(p is q for p, q in zip(trainer.parameters(), sampler.parameters(), strict=True))
        s.forward_backward([samples.cross_entropy(s.encode("n=12"))])
        s.optim_step(rlnb.AdamParams(learning_rate=1e-2))
        assert s.weights_sync().result(timeout=30).weights_version == 1
        assert all(p.requires_grad for p in trainer.parameters())  # still the trainer's, trainable
    with rlnb.connect("local", model="tiny", device="cpu", record=False) as full:  # one that samples keeps its copy
        trainer, sampler = full.backend.trainer, full.backend.sampler
        assert not any(p is q for p, q in zip(trainer.parameters(), sampler.parameters(), strict=True))
