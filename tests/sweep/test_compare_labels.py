"""``rlnb.compare`` of an ablation's runs: each run's line is named by its variant where its config has one, so two
variants whose configs agree to the label's 3 significant digits stay two configs of two seeds each."""

from rlnb import compare
from rlnb.history import History


def run(variant: str | None, lr: float, seed: int) -> History:
    label = "baseline" if variant == "baseline" else f"learning_rate={lr:.3g}"
    named = {"variant": variant} if variant is not None else {}
    history = History(config={"label": label, **named, "seed": seed})
    history.log(1, reward=0.5 + seed)
    return history


def test_variants_whose_labels_agree_are_two_lines_of_two_seeds():
    """Variants a (lr 1.0004e-3) and c (1.0003e-3): four lines ``learning_rate=0.001 (0)``... each one seed."""
    runs = [run(v, lr, s) for v, lr in (("a", 1.0004e-3), ("c", 1.0003e-3)) for s in (0, 1)]
    table = compare(runs)
    assert table.groupby("run")["seed"].nunique().to_dict() == {
        "a (learning_rate=0.001)": 2,
        "c (learning_rate=0.001)": 2,
    }


def test_the_baseline_and_runs_without_a_variant_keep_their_label():
    runs = [run("baseline", 1e-3, 0), run(None, 3e-3, 0)]
    assert list(compare(runs)["run"].unique()) == ["baseline", "learning_rate=0.003"]
