"""A search on several seeds prunes each trial against the trials on its own seed alone (``SeedPruner``).

Early rewards depend on the seed far more than on the config: step 1's is the untrained model's, the same for
every rate on a seed. A pruner comparing a seed-1 trial with
seed-0 trials at step 3 stops it for its seed, good rates included, and the best-mean config becomes the one whose
seed-1 trial happened to survive."""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any


class _SeedView:
    """The study as the pruner of a trial on seed ``seed`` reads it: its other trials are those on that seed."""

    def __init__(self, study: Any, seed_of: Callable[[Any], int], seed: int):
        self._study, self._seed_of, self._seed = study, seed_of, seed

    def get_trials(self, deepcopy: bool = True, states: Container[Any] | None = None) -> list[Any]:
        trials = self._study.get_trials(deepcopy=deepcopy, states=states)
        return [t for t in trials if self._seed_of(t) == self._seed]

    @property
    def trials(self) -> list[Any]:
        return self.get_trials()

    @property
    def best_trial(self) -> Any:
        """The best COMPLETE trial on this seed (WilcoxonPruner compares with it); ``ValueError`` for none, as
        Optuna's ``Study.best_trial``."""
        from optuna.study import StudyDirection
        from optuna.trial import TrialState

        done = [t for t in self.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None]
        if not done:
            raise ValueError(f"no trial on seed index {self._seed} is completed yet")
        pick = max if self._study.direction == StudyDirection.MAXIMIZE else min
        return pick(done, key=lambda t: t.value)

    def __getattr__(self, name: str) -> Any:  # direction, _storage (SuccessiveHalving's rung marks), study_name
        return getattr(self._study, name)


class SeedPruner:
    """``pruner`` (an Optuna pruner) judging each trial against the study's trials on the same seed alone:
    ``seed_of(trial)`` is a trial's seed index. MedianPruner's 4 start-up trials are then 4 on that seed."""

    def __init__(self, pruner: Any, seed_of: Callable[[Any], int]):
        self.pruner, self._seed_of = pruner, seed_of

    def prune(self, study: Any, trial: Any) -> bool:
        return bool(self.pruner.prune(_SeedView(study, self._seed_of, self._seed_of(trial)), trial))
