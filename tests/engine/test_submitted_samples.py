"""A forward-backward trains on its samples as they were when it was submitted: the operation runs later, on the
worker, and a caller's ``Sample`` is mutable (a loop reusing one, editing its weights in place)."""

import math
import threading

import pytest

import rlnb
from rlnb import samples
from rlnb.session.bodies import sample_list


def test_editing_a_sample_after_forward_backward_returns_does_not_change_what_it_trains_on(monkeypatch):
    """The body kept the caller's ``Sample`` objects: an edit made after ``forward_backward()`` returned, before the
    worker ran it, was what the operation computed (and trained on)."""
    with rlnb.connect("local", model="tiny", device="cpu", record=False, threads=1) as s:
        sample = samples.cross_entropy(s.encode("n=1 m=2 n=3"))
        as_submitted = s.forward_backward([sample], forward_only=True).result(timeout=30).loss
        gate, original = threading.Event(), s.backend._threads.before

        def held(*args):
            assert gate.wait(60), "the test never released the worker"
            original(*args)

        monkeypatch.setattr(s.backend._threads, "before", held)  # the worker waits before its next operation
        op = s.forward_backward([sample], forward_only=True)
        tokens = sample.model_input.chunks[0].encoded_text.tokens
        tokens[:] = [t + 1 for t in tokens]
        sample.loss_fn_inputs["weights"].data[0::2] = [0.0] * len(sample.loss_fn_inputs["weights"].data[0::2])
        sample.loss_fn_inputs["target_tokens"] = samples.cross_entropy([1] * (len(tokens) + 1)).loss_fn_inputs[
            "target_tokens"
        ]
        gate.set()
        assert op.result(timeout=60).loss == as_submitted
        edited = s.forward_backward([sample], forward_only=True).result(timeout=30).loss
        assert edited != pytest.approx(as_submitted)  # the edits change the loss: the check above could fail


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (
            lambda x: x.loss_fn_inputs["weights"].data.__setitem__(1, "a"),
            r"samples\[0\]\.loss_fn_inputs\.weights\.data\[1\]",
        ),
        (
            lambda x: x.loss_fn_inputs["weights"].data.__setitem__(1, True),
            r"samples\[0\]\.loss_fn_inputs\.weights\.data\[1\]",
        ),
        (lambda x: setattr(x.loss_fn_inputs["weights"], "shape", [99]), r"samples\[0\]\.loss_fn_inputs\.weights"),
        (
            lambda x: setattr(x.loss_fn_inputs["weights"], "dtype", "float64"),
            r"samples\[0\]\.loss_fn_inputs\.weights\.dtype",
        ),
        (
            lambda x: setattr(x.loss_fn_inputs["weights"], "sparse_col_indices", [1]),
            r"samples\[0\]\.loss_fn_inputs\.weights",
        ),
        (lambda x: setattr(x.loss_fn_inputs["weights"], "data", None), r"samples\[0\]\.loss_fn_inputs\.weights\.data"),
        (
            lambda x: x.loss_fn_inputs["target_tokens"].data.__setitem__(0, "a"),
            r"samples\[0\]\.loss_fn_inputs\.target_tokens\.data\[0\]",
        ),
        (lambda x: x.loss_fn_inputs.__setitem__("weights", 3), r"samples\[0\]\.loss_fn_inputs\.weights"),
        (lambda x: x.model_input.chunks[0].encoded_text.tokens.__setitem__(0, 1.5), r"samples\[0\]\.model_input"),
    ],
    ids=[
        "text weight",
        "bool weight",
        "shape",
        "dtype",
        "sparse",
        "no data",
        "text id",
        "not a tensor",
        "fractional token",
    ],
)
def test_a_sample_edited_to_bad_values_after_it_was_built_is_refused_naming_the_field(edit, named):
    """A ``Sample``'s fields can be set to anything after pydantic built it: the copy taken at submission was not
    validated, so text reached the engine as an INTERNAL_ERROR, a bool weight, a wrong shape or dtype or sparse
    indices were trained on, and ``data=None`` raised a bare ``TypeError``. The copy is validated by the rules the
    constructor applies, and the error names the field, before anything is sent."""
    with rlnb.connect("local", model="tiny", device="cpu", record=False, threads=1) as s:
        sample = samples.cross_entropy([1, 2, 3, 4])
        edit(sample)
        with pytest.raises(ValueError, match=named):
            s.forward_backward([sample], forward_only=True)


def test_a_sample_subclass_is_sent_as_a_plain_sample():
    """A subclass of ``Sample`` (its own validators, methods or fields) is copied into a plain ``Sample``: the
    operation reads the wire type, never the caller's class."""

    class Mine(rlnb.wire.Sample):
        note: str = "mine"

    base = samples.cross_entropy([1, 2, 3, 4])
    sent = sample_list([Mine(model_input=base.model_input, loss_fn_inputs=base.loss_fn_inputs)])[0]
    assert type(sent) is rlnb.wire.Sample
    assert sent.model_input.tokens == [1, 2, 3] and sent.loss_fn_inputs == base.loss_fn_inputs


def test_a_submitted_sample_is_copied_and_checked_whatever_its_parts_are():
    """The copy at submission reads a plain sample's fields as they are (no dump): a part that is a subclass, a dict,
    or a model with extra fields goes through the dump, and every part comes out plain, validated and not shared."""

    class MyTensor(rlnb.wire.TensorData):
        pass

    base = samples.cross_entropy([1, 2, 3, 4], [0.0, 0.0, 1.0, 1.0])
    subclass, as_dict, extra = (base.model_copy(deep=True) for _ in range(3))
    subclass.loss_fn_inputs["weights"] = MyTensor(data=[0.0, 1.0, 1.0], dtype="float32")
    as_dict.loss_fn_inputs["target_tokens"] = {"data": [2, 3, 4], "dtype": "int64"}
    extra.model_input.chunks[0].encoded_text.note = [1]
    sent = sample_list([base, subclass, as_dict, extra])
    assert sent[:3] == [base] * 3 and sent[3].model_input.tokens == [1, 2, 3]
    assert all(type(t) is rlnb.wire.TensorData for s in sent for t in s.loss_fn_inputs.values())
    extra.model_input.chunks[0].encoded_text.note.append(2)
    base.loss_fn_inputs["weights"].data[0] = 5.0
    base.model_input.chunks[0].encoded_text.tokens[0] = 7
    assert sent[3].model_input.chunks[0].encoded_text.note == [1]
    assert sent[0].loss_fn_inputs["weights"].data[0] == 0.0 and sent[0].model_input.tokens == [1, 2, 3]
    base.loss_fn_inputs["weights"].data[1] = 1  # an int set after validation: the copy holds the float
    assert sample_list([base])[0].loss_fn_inputs["weights"].data == [5.0, 1.0, 1.0]
    subclass.loss_fn_inputs["weights"].data[1] = math.nan
    with pytest.raises(ValueError, match=r"samples\[0\]\.loss_fn_inputs\.weights: .*finite"):
        sample_list([subclass])
    chunk_dict = base.model_copy(deep=True)  # a chunk with no ``encoded_text`` attribute: the dump takes it too
    chunk_dict.model_input.chunks[0] = {"encoded_text": {"tokens": [9, 8, 7]}}
    copied = sample_list([chunk_dict])[0].model_input.chunks[0]
    assert type(copied) is rlnb.wire.ModelInputChunk and copied.encoded_text.tokens == [9, 8, 7]


class _LooksLikeTensorData(type):
    """A metaclass whose classes say they ``==`` ``wire.TensorData``."""

    def __eq__(cls, other):
        return other is rlnb.wire.TensorData or type.__eq__(cls, other)

    __hash__ = type.__hash__


@pytest.mark.parametrize("meta", [type, _LooksLikeTensorData])
def test_a_sample_edited_to_hold_an_object_no_field_takes_is_refused_naming_the_field(meta):
    """An object set into ``loss_fn_inputs`` after construction: the fast copy compared types with ``==`` (a metaclass
    saying it equals ``TensorData`` passed), and pydantic's dump of it raised ``AttributeError`` naming no field."""
    weird = meta("Weird", (), {"data": [1.0], "dtype": "float32", "shape": [1]})()
    sample = samples.cross_entropy([1, 2, 3])
    sample.loss_fn_inputs["weights"] = weird
    with pytest.raises(ValueError, match=r"samples\[0\]\.loss_fn_inputs\.weights: Input should be"):
        sample_list([sample])
