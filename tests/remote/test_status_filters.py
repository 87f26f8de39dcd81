"""``list_sessions`` / ``list_model_resources``' ``status``: one string is one status (its characters were sent, one
a value: ``status=A,A,E,G,...``), a list is several, and each is checked against the wire's catalogue before anything
is sent (a misspelt one went out unchecked, and matched nothing)."""

import httpx
import pytest

from rlnb import wire
from rlnb.remote.client import APIClient

PAGE = {"data": [], "meta": {"limit": 100, "has_more": False, "next_cursor": ""}}


@pytest.fixture
def sent():
    return []


@pytest.fixture
def client(sent):
    def handler(request):
        sent.append(request.url.params.get_list("status"))
        return httpx.Response(200, json=PAGE)

    with APIClient("https://rl.test", api_key="sk-test-12345678", transport=httpx.MockTransport(handler)) as c:
        yield c


LISTS = [("list_sessions", wire.SessionStatus), ("list_model_resources", wire.ModelResourcesStatus)]


@pytest.mark.parametrize(("method", "catalogue"), LISTS)
def test_one_status_string_is_one_value(client, sent, method, catalogue):
    last = list(catalogue)[-1]
    getattr(client, method)(status=str(last))
    getattr(client, method)(status=last)  # the enum member, a str too
    assert sent == [[last.value], [last.value]]


@pytest.mark.parametrize(("method", "catalogue"), LISTS)
def test_several_statuses_are_comma_joined(client, sent, method, catalogue):
    two = [str(s) for s in wire.filterable(catalogue)[:2]]
    getattr(client, method)(status=reversed(two))
    getattr(client, method)()  # no filter: no status sent
    assert sent == [[",".join(sorted(two))], []]


@pytest.mark.parametrize(("method", "catalogue"), LISTS)
@pytest.mark.parametrize("bad", ["RUNNING_TYPO", ["{first}", "STATUS_RUNING"], ["{unspecified}"], [""], ["{first}", 3]])
def test_a_status_not_in_the_catalogue_is_refused_before_sending(client, sent, method, catalogue, bad):
    first = wire.filterable(catalogue)[0]
    unspecified = f"{first.value.removesuffix(first.name)}UNSPECIFIED"
    fill = {"first": first, "unspecified": unspecified}
    given = bad if isinstance(bad, str) else [b.format(**fill) if isinstance(b, str) else b for b in bad]
    with pytest.raises(ValueError, match="status") as caught:
        getattr(client, method)(status=given)
    allowed = str(caught.value).split("; got")[0]
    assert str(first) in allowed and unspecified not in allowed  # the values a filter takes are listed
    assert sent == []


@pytest.mark.parametrize(("method", "catalogue"), LISTS)
def test_no_status_is_no_filter_and_a_status_that_is_no_list_is_refused_naming_it(client, sent, method, catalogue):
    """``status=None`` (as ``created_by=None`` beside it) and ``status=5`` raised ``TypeError: 'NoneType' object is
    not iterable``, naming no field."""
    getattr(client, method)(status=None)
    assert sent == [[]]
    with pytest.raises(ValueError, match=r"^status must be one or a list of .*; got 5$"):
        getattr(client, method)(status=5)
    assert sent == [[]]
