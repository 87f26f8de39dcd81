"""What ``Registry``'s mixins need of the registry is stated once, in ``core.RegistryCore``. Each mixin used to
re-declare the registry's methods it called (``_end`` twice, ``now`` and ``_save`` three times) in an
``if TYPE_CHECKING`` block that nothing checked against their definitions."""

import ast
import inspect

import pytest

from rlnb.server import core, ops, resources, sessions
from rlnb.server.registry import Registry

MIXINS = (resources.ResourcesMixin, sessions.SessionsMixin, ops.OperationsMixin)


def test_each_method_a_mixin_needs_is_defined_once_by_the_registry_or_one_mixin():
    needed = core.RegistryCore.__abstractmethods__
    assert {"now", "_end", "_save", "session", "_touch"} <= needed
    for name in needed:
        definers = [cls.__name__ for cls in (Registry, *MIXINS) if name in vars(cls)]
        assert len(definers) == 1, f"{name} is defined by {definers}"
    assert not Registry.__abstractmethods__
    assert all(issubclass(cls, core.RegistryCore) for cls in MIXINS)


def test_no_mixin_declares_the_registry_again():
    """Neither a ``TYPE_CHECKING`` block nor an attribute annotation in a mixin's class body: both live in core."""
    for cls in MIXINS:
        node = ast.parse(inspect.getsource(cls)).body[0]
        assert isinstance(node, ast.ClassDef)
        declared = [ast.unparse(n)[:40] for n in node.body if isinstance(n, ast.If | ast.AnnAssign)]
        assert not declared, f"{cls.__name__} declares {declared}"


def test_a_registry_missing_a_method_cannot_be_made():
    """A method nobody defines is an error at once, never a stub that returns None."""

    class Partial(resources.ResourcesMixin, sessions.SessionsMixin, ops.OperationsMixin):  # no Registry methods
        pass

    with pytest.raises(TypeError, match="_end"):
        Partial()
