"""The addition task's held-out split is a fair sample of its 55 pairs."""

from collections import Counter

import pytest

from rlnb.tasks import addition_task

PAIRS = [(a, b) for a in range(10) for b in range(10) if a + b <= 9]


def _pairs(prompts):
    return [tuple(int(x) for x in p.removesuffix("=").split("+")) for p in prompts]


@pytest.mark.parametrize("n_eval", [1, 5, 11, 27, 54])
def test_every_sum_is_held_out_in_proportion_to_its_share(n_eval):
    """A plain shuffle held out "5" for 4 of 11 sums on split_seed 0 (its share of the 55 pairs is 1.2), so the
    held-out accuracy mostly measured one answer and ``chance`` was 0.36. Each sum's count is now within one pair of
    its share, on every seed, and the two splits are the 55 pairs, once each."""
    share = Counter(a + b for a, b in PAIRS)
    for seed in range(10):
        task = addition_task(n_eval=n_eval, split_seed=seed)
        held, train = _pairs(task.eval_prompts), _pairs(task.prompts)
        assert sorted(held + train) == sorted(PAIRS) and len(held) == n_eval
        counts = Counter(a + b for a, b in held)
        for total, m in share.items():
            assert abs(counts[total] - n_eval * m / len(PAIRS)) < 1, (seed, total, counts)
        assert task.eval_prompts == addition_task(n_eval=n_eval, split_seed=seed).eval_prompts


def test_chance_is_the_best_collapse_and_the_training_majority_scores_it():
    """The best constant answer scores 2/11 on every seed, and a policy collapsed onto "9", the training split's most
    common answer (or one of two), scores the same: on seed 0 "9" scored 0.18 where "5" scored 0.36."""
    for seed in range(10):
        task = addition_task(split_seed=seed)
        held = [str(a + b) for a, b in _pairs(task.eval_prompts)]
        counts = Counter(str(a + b) for a, b in _pairs(task.prompts))
        top = [answer for answer, n in counts.items() if n == max(counts.values())]
        assert task.chance == pytest.approx(2 / 11) and "9" in top, (seed, counts)
        assert held.count("9") / len(held) == task.chance, (seed, held)
