"""An Optuna space whose list holds more choices than a sweep runs trials (``np.geomspace(1e-5, 1e-1, 10**6)`` as a
list): each choice was validated as params one by one (seconds per 100,000) and Optuna stores the whole list with
every trial's param in ``study.db``. Refused naming the field and the limit, before anything is validated."""

import pytest

import rlnb
from rlnb.sweep.space import MAX_CONFIGS, parse_space


def test_a_search_space_of_more_choices_than_trials_is_refused_naming_the_field(monkeypatch):
    import rlnb.sweep.applying as applying

    checked = []
    monkeypatch.setattr(applying, "apply", lambda base, config: checked.append(config))
    many = [1e-5 * (1 + i / MAX_CONFIGS) for i in range(MAX_CONFIGS + 1)]
    with pytest.raises(ValueError, match=r"space\['learning_rate'\] lists 10001 choices: at most 10000"):
        parse_space(rlnb.AdamParams(), {"learning_rate": many})
    assert checked == []  # refused before any choice was validated
    parse_space(rlnb.AdamParams(), {"learning_rate": many[:MAX_CONFIGS]})
    assert len(checked) == MAX_CONFIGS + 1  # the optimizer, then each choice
