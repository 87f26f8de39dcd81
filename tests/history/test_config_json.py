"""``config.json`` is standard JSON, whatever was annotated: ``NaN`` and ``Infinity`` written bare (Python's json
default) were refused by jq, JavaScript's ``JSON.parse`` and DuckDB. The floats JSON has no number for are written as
the exports write them (``"NaN"``, ``"Infinity"``, ``"-Infinity"``) and read back as floats; a file an older rlnb wrote
bare reads as before."""

import json
import math

import pytest

from rlnb.history import History

ODD = {"x": math.nan, "grid": [math.inf, -math.inf, 1.5], "nested": {"k": (math.nan, "text")}}


def reject(constant: str) -> None:
    raise ValueError(f"{constant} is not standard JSON")


def check_read_back(config: dict) -> None:
    assert math.isnan(config["x"]) and math.isnan(config["nested"]["k"][0])
    assert config["grid"] == [math.inf, -math.inf, 1.5] and config["nested"]["k"][1] == "text"


def test_a_config_annotated_with_nan_and_infinity_is_standard_json_and_reads_back(tmp_path):
    history = History.create({"optimizer": "adam"}, tmp_path, "r")
    history.annotate(**ODD)
    history.close()
    text = (tmp_path / "r" / "config.json").read_text()
    written = json.loads(text, parse_constant=reject)
    assert written["x"] == "NaN" and written["grid"][:2] == ["Infinity", "-Infinity"]
    check_read_back(History.load(tmp_path / "r").config)
    again = History.create({"optimizer": "adam"}, tmp_path, "r")  # a later session keeps the earlier's fields
    again.close()
    json.loads((tmp_path / "r" / "config.json").read_text(), parse_constant=reject)
    check_read_back(History.load(tmp_path / "r").config)


def test_a_saved_history_writes_a_standard_config_json(tmp_path):
    history = History.create({"optimizer": "adam"}, tmp_path, "r")
    history.annotate(**ODD)
    saved = history.save(tmp_path / "saved")
    history.close()
    json.loads((saved / "config.json").read_text(), parse_constant=reject)
    check_read_back(History.load(saved).config)


@pytest.mark.parametrize("run_id", ["NaN", "Infinity"])
def test_a_config_written_bare_by_an_older_rlnb_still_reads_and_a_runs_names_stay_text(tmp_path, run_id):
    """A run id or label spelled as a non-finite float stays the run's name (text), not a float."""
    History.create({"optimizer": "adam"}, tmp_path, run_id).close()
    file = tmp_path / run_id / "config.json"
    config = json.loads(file.read_text())
    file.write_text(json.dumps({**config, **ODD, "label": "-Infinity"}, indent=2))  # bare NaN, as an older rlnb wrote
    loaded = History.load(tmp_path / run_id).config
    check_read_back(loaded)
    assert loaded["run_id"] == run_id and loaded["label"] == "-Infinity"


def test_a_damaged_config_is_set_aside_past_a_dangling_link_of_the_name_it_would_take(tmp_path):
    """The name was picked with ``exists()``, false for a link to nothing: the rename replaced the user's link."""
    import rlnb
    from rlnb.testing import FakeBackend

    rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r").close()
    run = tmp_path / "r"
    (run / "config.json").write_text("{not json")
    (run / "config.json.damaged").symlink_to(tmp_path / "gone")
    with pytest.warns(RuntimeWarning, match=r"kept as config\.json\.damaged\.1 "):
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r").close()
    assert (run / "config.json.damaged").is_symlink() and not (tmp_path / "gone").exists()
    assert (run / "config.json.damaged.1").read_text() == "{not json"


def test_a_text_annotated_like_a_non_finite_number_reads_back_as_text_beside_the_floats(tmp_path):
    """``annotate(note="NaN")`` read back as the float NaN: a free-form value's text and a number's spelling are one
    string in JSON. Where a text is spelled so, ``config.json`` lists it (``rlnb_texts``): it stays text, the floats
    beside it stay floats, across sessions of the run and in a saved copy; a file without the list (an older rlnb's)
    reads as before (``test_a_config_written_bare_by_an_older_rlnb_still_reads...``)."""
    history = History.create({"optimizer": "adam"}, tmp_path, "r")
    history.annotate(**ODD, note="NaN", tags=["Infinity", math.inf], deep={"a": {"b": "-Infinity"}})
    saved = history.save(tmp_path / "saved")
    history.close()
    written = json.loads((tmp_path / "r" / "config.json").read_text(), parse_constant=reject)
    assert sorted(written["rlnb_texts"]) == [["deep", "a", "b"], ["note"], ["tags", 0]]
    History.create({"optimizer": "adam"}, tmp_path, "r").close()  # a later session writes the config anew
    for folder in (tmp_path / "r", saved):
        config = History.load(folder).config
        check_read_back(config)
        assert config["note"] == "NaN" and config["deep"] == {"a": {"b": "-Infinity"}}, folder
        assert config["tags"][0] == "Infinity" and config["tags"][1] == math.inf, folder
        assert "rlnb_texts" not in config


def test_the_config_field_that_lists_texts_cannot_be_annotated(tmp_path):
    history = History.create({"optimizer": "adam"}, tmp_path, "r")
    with pytest.raises(ValueError, match="rlnb_texts is the run's own field"):
        history.annotate(rlnb_texts=[["x"]])
    history.close()
