"""A transport of the user's own (a proxy library, a custom one) may raise an error of its own whose text lists the
request's headers: rlnb raised it past ``connect`` and ``APIClient``'s calls as it was, so ``str``, ``repr`` and the
printed traceback quoted the API key. rlnb now masks the key in its text in place, keeping its type (the poller and
sender judge such an error by it)."""

import traceback
from collections.abc import Callable

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI


class OwnText(Exception):
    """An error whose ``__str__`` reads an attribute of its own: nothing rlnb can mask in place."""

    def __init__(self, headers: dict[str, str]):
        super().__init__("refused")
        self.headers = headers

    def __str__(self) -> str:
        return f"refused with {self.headers}"


def chained(headers: dict[str, str]) -> Exception:
    try:
        raise ValueError(f"bad header {headers['authorization']}")
    except ValueError as cause:
        error = RuntimeError("the proxy broke")
        error.__cause__ = cause
        return error


def noted(headers: dict[str, str]) -> Exception:
    error = RuntimeError("the proxy broke")
    error.add_note(f"sent {headers}")
    return error


ERRORS: dict[str, tuple[Callable[[dict[str, str]], BaseException], type[BaseException]]] = {
    "message": (lambda h: RuntimeError(f"proxy refused the request with headers {h}"), RuntimeError),
    "a dict argument": (lambda h: RuntimeError(h), RuntimeError),
    "two arguments": (lambda h: RuntimeError("refused", h["authorization"]), RuntimeError),
    "OSError": (lambda h: ConnectionRefusedError(111, f"refused {h['authorization']}", h["authorization"]), OSError),
    "a chained cause": (chained, RuntimeError),
    "a note": (noted, RuntimeError),
    "Ctrl-C": (lambda h: KeyboardInterrupt(f"interrupted sending {h}"), KeyboardInterrupt),
    "a group's member": (lambda h: ExceptionGroup("two failed", [RuntimeError(h), ValueError("x")]), ExceptionGroup),
}


def raising(make: Callable[[dict[str, str]], BaseException]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        raise make(dict(request.headers))

    return httpx.MockTransport(handler)


def printed(error: BaseException) -> str:
    return f"{error}\n{error!r}\n{''.join(traceback.format_exception(error))}"


@pytest.mark.parametrize("error", ERRORS.values(), ids=ERRORS.keys())
def test_a_transports_own_error_quoting_the_key_keeps_its_type_and_shows_no_key(error):
    make, kind = error
    with pytest.raises(kind) as info, APIClient(BASE, KEY, transport=raising(make)) as client:
        client.supported_models()
    assert type(info.value) is type(make({"authorization": "x"}))  # the same class, not a wrapper
    assert "***" in printed(info.value) and KEY not in printed(info.value)


class FixedArgs(Exception):
    """An error whose ``args`` is a read-only property: assigning it raised AttributeError inside rlnb's handler."""

    def __init__(self, headers: dict[str, str]):
        super().__init__()
        self._text = f"refused with {headers}"

    @property
    def args(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self._text,)

    def __str__(self) -> str:
        return self._text


UNMASKABLE = {
    "its own __str__": (OwnText, "OwnText: refused with"),
    "read-only args": (FixedArgs, "FixedArgs: refused with"),
    "a group's message": (lambda h: ExceptionGroup(f"refused {h}", [RuntimeError("x")]), "ExceptionGroup: refused"),
}


@pytest.mark.parametrize("error", UNMASKABLE.values(), ids=UNMASKABLE.keys())
def test_an_error_whose_own_str_quotes_the_key_becomes_an_api_error_naming_it(error):
    make, shown = error
    with pytest.raises(rlnb.APIError) as info, APIClient(BASE, KEY, transport=raising(make)) as client:
        client.supported_models()
    assert shown in str(info.value) and "could not mask" in str(info.value)
    assert info.value.__context__ is None and info.value.__cause__ is None
    assert "***" in printed(info.value) and KEY not in printed(info.value)


def test_an_error_without_a_key_is_raised_untouched():
    error = RuntimeError("the proxy broke", {"n": 1})
    with pytest.raises(RuntimeError) as info, APIClient(BASE, KEY, transport=raising(lambda h: error)) as client:
        client.supported_models()
    assert info.value is error and error.args == ("the proxy broke", {"n": 1})


def test_connect_raises_a_transports_error_from_the_create_without_the_key():
    fake = FakeAPI()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/training-sessions"):
            raise RuntimeError(f"proxy refused the request with headers {dict(request.headers)}")
        return fake(request)

    with pytest.raises(RuntimeError, match="proxy refused") as info:
        rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(handler), record=False, **FAST_POLL)
    assert "Bearer ***" in printed(info.value) and KEY not in printed(info.value)


def failing(make: Callable[[httpx.Request], BaseException]) -> httpx.MockTransport:
    """A transport that raises ``make(request)``: the very request rlnb sent."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise make(request)

    return httpx.MockTransport(handler)


def key_paths(root: object) -> list[str]:
    """Where ``KEY`` can be read from ``root``: every attribute, argument, chained error, container item and
    header (``exc.request.headers``), as a path such as ``e.request.headers['authorization']``."""
    found, seen, todo = [], set(), [("e", root)]
    while todo:
        path, each = todo.pop()
        if id(each) in seen or each is None or isinstance(each, int | float | type):
            continue
        seen.add(id(each))
        if isinstance(each, str | bytes):
            found += [path] if (KEY if isinstance(each, str) else KEY.encode()) in each else []
        elif isinstance(each, httpx.Headers):
            todo += [(f"{path}[{name!r}]", value) for name, value in each.raw]
        elif isinstance(each, dict):
            todo += [(f"{path}[{k!r}]", v) for k, v in each.items()] + [(f"{path}.keys()", list(each))]
        elif isinstance(each, list | tuple | set):
            todo += [(f"{path}[{i}]", v) for i, v in enumerate(each)]
        else:
            if isinstance(each, BaseException):
                todo += [
                    (f"{path}.{a}", getattr(each, a, None)) for a in ("args", "__cause__", "__context__", "__notes__")
                ]
            todo += [(f"{path}.{a}", v) for a, v in getattr(each, "__dict__", {}).items()]
    return found


class KeepsRequest(Exception):
    """A transport's own error that keeps the request it failed, as httpx's own errors do."""

    def __init__(self, request: httpx.Request):
        super().__init__("the proxy refused it")
        self.request = request


class KeepsACopy(Exception):
    def __init__(self, request: httpx.Request):
        super().__init__("the proxy refused it")
        self.sent = httpx.Request("GET", "http://proxy.test", headers=request.headers)


def status_error(request: httpx.Request) -> Exception:
    return httpx.HTTPStatusError("refused", request=request, response=httpx.Response(502, request=request))


KEPT = {
    "httpx.HTTPStatusError": status_error,
    "its own error keeping .request": KeepsRequest,
    "a copy of the request": KeepsACopy,
}


@pytest.mark.parametrize("make", KEPT.values(), ids=KEPT.keys())
def test_a_transports_own_error_holding_the_request_keeps_its_type_and_no_attribute_holds_the_key(make):
    """``exc.request.headers`` of an error a transport raised (``httpx.HTTPStatusError``, one of its own) still held
    the Authorization header: its text was masked, not its attributes. The headers are masked in place now."""
    with pytest.raises(Exception) as info, APIClient(BASE, KEY, transport=failing(make)) as client:
        client.supported_models()
    assert type(info.value) is type(make(httpx.Request("GET", BASE)))
    assert key_paths(info.value) == []
    request = info.value.request if hasattr(info.value, "request") else info.value.sent
    assert request.headers["authorization"] == "Bearer ***"


class KeepsTheHeaders(httpx.ConnectError):
    """httpx's own error type, with a plain copy of the headers beside the request."""

    def __init__(self, request: httpx.Request):
        super().__init__("refused", request=request)
        self.sent = dict(request.headers)


class KeepsTheHeadersToo(Exception):
    def __init__(self, request: httpx.Request):
        super().__init__("refused")
        self.sent = dict(request.headers)


@pytest.mark.parametrize("make", [KeepsTheHeaders, KeepsTheHeadersToo])
def test_an_error_whose_attribute_holds_a_copy_of_the_key_is_chained_to_nothing(make):
    """A plain copy of the headers is nothing rlnb can mask without changing what the class reads: such an error is
    left out of what rlnb raises (no ``__cause__`` or ``__context__``), an ``APIError`` naming its type."""
    with pytest.raises(rlnb.APIError) as info, APIClient(BASE, KEY, transport=failing(make), max_retries=0) as client:
        client.supported_models()
    assert key_paths(info.value) == [], key_paths(info.value)
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert f"{make.__name__}: refused" in str(info.value)


class KeepsTheClient(Exception):
    def __init__(self, client: httpx.Client):
        super().__init__("refused")
        self.client = client


def test_masking_an_error_leaves_the_own_headers_of_a_live_client_it_holds_as_they_are():
    """An error holding the user's ``http_client``, whose own default headers carry the key: masking them in place
    would break every later request of that client. They are left as they are, and the error, from which the key can
    still be read, is raised as an ``APIError`` with nothing chained."""
    own = httpx.Client(headers={"x-api-key": KEY}, transport=failing(lambda request: KeepsTheClient(own)))
    with own, pytest.raises(rlnb.APIError) as info, APIClient(BASE, KEY, http_client=own) as client:
        client.supported_models()
    assert own.headers["x-api-key"] == KEY
    assert key_paths(info.value) == [] and info.value.__context__ is None
