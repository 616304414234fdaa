"""FormationTransport: the five steps of docs/proxy.md, attack by attack.

A formation where this member ("planner") may call "coder" and "reviewer"; "entry" is a
member it may not call. Doors are in-process fakes behind a counting network: every
refusal test asserts that nothing reached the network and no door URL was looked up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from gateway.proxy.formation import (
    AllowList,
    DoorUnavailable,
    EgressRefused,
    FormationClient,
    FormationRefused,
    FormationTransport,
    egress_reaches_loopback,
    names_formation,
)
from tests.support.proxy_fakes import Doors, FakeDoor, FakeNet

CODER_DOOR = "127.0.0.1:4101"
REVIEWER_DOOR = "127.0.0.1:4102"
ENTRY_DOOR = "127.0.0.1:4100"
OUTSIDE = "outside.example"
CODER_TOKEN = "mft1.Y29kZXItcGF5bG9hZA.c2lnbmF0dXJlLWNvZGVy"
REVIEWER_TOKEN = "mft1.cmV2aWV3ZXItcGF5bG9hZA.c2lnbmF0dXJlLXJldmlld2Vy"
TOKENS = {"coder": CODER_TOKEN, "reviewer": REVIEWER_TOKEN}
ALLOW = ["localhost", OUTSIDE]


class Formation:
    def __init__(self, *, allow: list[str] | None = None, trust: str | None = None,
                 doors: dict[str, FakeDoor] | None = None, door_wait: float = 10.0) -> None:
        self.coder = FakeDoor()
        self.reviewer = FakeDoor()
        self.entry = FakeDoor()
        self.outside = FakeDoor()
        apps: dict[str, Any] = {CODER_DOOR: self.coder, REVIEWER_DOOR: self.reviewer,
                                ENTRY_DOOR: self.entry, OUTSIDE: self.outside}
        for netloc, door in (doors or {}).items():
            apps[netloc] = door
        self.net = FakeNet(apps)
        self.doors = Doors({"coder": f"http://{CODER_DOOR}",
                            "reviewer": f"http://{REVIEWER_DOOR}",
                            "entry": f"http://{ENTRY_DOOR}"})
        self.calls: list[tuple[str, str]] = []
        self.trust = trust
        self.transport = FormationTransport(
            self.net, tokens=TOKENS, doors=self.doors,
            allow=ALLOW if allow is None else allow, trust=lambda: self.trust,
            on_call=lambda callee, url: self.calls.append((callee, url)),
            door_wait=door_wait)

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return FormationClient(transport=self.transport, **kwargs)

    def bare_client(self, **kwargs: Any) -> httpx.AsyncClient:
        """A plain httpx client on the transport: only the transport's checks apply."""
        return httpx.AsyncClient(transport=self.transport, **kwargs)

    def assert_nothing_opened(self) -> None:
        assert self.net.opened == []
        assert self.doors.lookups == []
        assert self.calls == []

    def token_sent_to(self) -> set[str]:
        """Every netloc that ever received any formation token."""
        return {r.url.netloc.decode() for r in self.net.opened
                for value in r.headers.get_list("authorization")
                if "mft1" in value}


@pytest.fixture
def formation() -> Iterator[Formation]:
    yield Formation()


# -- Step 1: the virtual name ----------------------------------------------------------

async def test_a_callee_at_its_virtual_address_gets_the_token_at_its_real_door(
        formation: Formation) -> None:
    async with formation.client() as client:
        response = await client.post("http://coder.formation.invalid/a/b?x=1",
                                     json={"hello": "door"})
    assert response.json()["error"]["code"] == -32601     # the fake door answered
    [sent] = formation.coder.seen
    assert sent.path == "/a/b"
    assert sent.values("authorization") == [f"Bearer {CODER_TOKEN}"]
    assert sent.values("host") == [CODER_DOOR]
    assert sent.values("x-murmur-task-origin") == ["peer"]
    assert sent.values("x-murmur-task-trust") == ["untrusted"]
    assert sent.body == {"hello": "door"}
    [request] = formation.net.opened
    assert str(request.url) == f"http://{CODER_DOOR}/a/b?x=1"
    assert formation.calls == [("coder", "http://coder.formation.invalid/a/b?x=1")]
    # The component's view of its request stays virtual: no token, no door URL.
    assert str(response.request.url) == "http://coder.formation.invalid/a/b?x=1"
    assert "authorization" not in response.request.headers


HOST_TRICKS = [
    "http://CODER.formation.invalid/",
    "http://Coder.Formation.Invalid/",
    "http://coder.formation.invalid./",
    "http://coder.formation.invalid../",
    "http://coder.formation.invalid.evil.example/",
    "http://coder.formation.invalid:8080/",
    "http://coder.formation.invalid:80/",
    "http://x@coder.formation.invalid/",
    "http://x:y@coder.formation.invalid/",
    "http://coder.formation.invalid@evil.example/",
    "http://c%6Fder.formation.invalid/",
    "http://coder%2Eformation.invalid/",
    "http://coder.formation%2einvalid/",
    "http://coder.form%2561tion.invalid/",
    "http://xn--cder-5qa.formation.invalid/",
    "http://xn--coder-.formation.invalid/",       # punycode httpx cannot even parse
    "http://cöder.formation.invalid/",
    "http://ｃｏｄｅｒ.formation.invalid/",
    "http://coder。formation。invalid/",
    "https://coder.formation.invalid/",
    "HTTP://coder.formation.invalid/",
    "http://formation.invalid/",
    "http://.formation.invalid/",
    "http://a.coder.formation.invalid/",
]


@pytest.mark.parametrize("url", HOST_TRICKS)
async def test_host_trick_is_refused_before_any_lookup_or_connection(
        formation: Formation, url: str) -> None:
    async with formation.client() as client:
        with pytest.raises(FormationRefused) as refused:
            await client.get(url)
    assert str(refused.value) == FormationRefused.MESSAGE
    formation.assert_nothing_opened()


#: The tricks httpx does not normalize away: the transport alone refuses them, for a
#: component that wraps the transport in a client of its own.
TRANSPORT_VISIBLE_TRICKS = [
    "http://coder.formation.invalid./",
    "http://coder.formation.invalid.evil.example/",
    "http://coder.formation.invalid:8080/",
    "http://x@coder.formation.invalid/",
    "http://coder.formation.invalid@evil.example/",
    "http://c%6Fder.formation.invalid/",
    "http://coder.formation%2einvalid/",
    "http://xn--cder-5qa.formation.invalid/",
    "https://coder.formation.invalid/",
    "http://formation.invalid/",
]


@pytest.mark.parametrize("url", TRANSPORT_VISIBLE_TRICKS)
async def test_host_trick_through_a_bare_client_is_refused_by_the_transport(
        formation: Formation, url: str) -> None:
    async with formation.bare_client() as client:
        with pytest.raises(FormationRefused) as refused:
            await client.get(url)
    assert str(refused.value) == FormationRefused.MESSAGE
    formation.assert_nothing_opened()


@pytest.mark.parametrize("host", [
    "reviewer.formation.invalid",        # another callee: no token swapping
    "CODER.formation.invalid",
    "coder.formation.invalid:80",
    "evil.example",
    "127.0.0.1:4101",
])
async def test_absolute_url_whose_host_header_disagrees_is_refused(
        formation: Formation, host: str) -> None:
    async with formation.client() as client:
        with pytest.raises(FormationRefused):
            await client.get("http://coder.formation.invalid/", headers={"Host": host})
    formation.assert_nothing_opened()


async def test_real_url_carrying_a_virtual_host_header_is_refused(
        formation: Formation) -> None:
    async with formation.client() as client:
        with pytest.raises(FormationRefused):
            await client.get(f"http://{CODER_DOOR}/",
                             headers={"Host": "coder.formation.invalid"})
    formation.assert_nothing_opened()


async def test_two_host_headers_on_a_virtual_address_are_refused(
        formation: Formation) -> None:
    request = httpx.Request("GET", "http://coder.formation.invalid/", headers=[
        ("Host", "coder.formation.invalid"), ("Host", "reviewer.formation.invalid")])
    with pytest.raises(FormationRefused):
        await formation.transport.handle_async_request(request)
    formation.assert_nothing_opened()


@pytest.mark.parametrize("name", ["entry", "ghost", "planner", "a" * 40])
async def test_member_it_may_not_call_unknown_or_itself_gets_the_one_refusal(
        formation: Formation, name: str) -> None:
    async with formation.client() as client:
        with pytest.raises(FormationRefused) as refused:
            await client.post(f"http://{name}.formation.invalid/", json={})
    assert type(refused.value) is FormationRefused
    assert str(refused.value) == FormationRefused.MESSAGE
    assert name not in str(refused.value)
    formation.assert_nothing_opened()


def test_names_formation_reads_every_encoding() -> None:
    for host in ["coder.formation.invalid", "CODER.FORMATION.INVALID.",
                 "coder%2Eformation%2Einvalid", "coder%252Eformation.invalid",
                 "coder.ｆｏｒｍａｔｉｏｎ.invalid", "x.formation.invalid.evil"]:
        assert names_formation(host), host
    for host in ["127.0.0.1", "example.com", "formation.example", "invalid"]:
        assert not names_formation(host), host


# -- Step 2: the door URL --------------------------------------------------------------

async def test_door_url_that_never_arrives_fails_after_the_wait_and_opens_nothing() -> None:
    formation = Formation(door_wait=0.05)
    formation.doors.urls.pop("coder")
    async with formation.client() as client:
        with pytest.raises(DoorUnavailable) as unavailable:
            await client.get("http://coder.formation.invalid/")
    assert str(unavailable.value).startswith("the door address of member 'coder' has not ")
    assert "0.05 s" in str(unavailable.value)
    assert formation.net.opened == []


async def test_door_url_arriving_within_the_wait_is_used() -> None:
    formation = Formation(door_wait=5.0)
    formation.doors.urls.pop("coder")
    async with formation.client() as client:
        pending = asyncio.create_task(client.get("http://coder.formation.invalid/"))
        await asyncio.sleep(0.02)
        assert not pending.done()
        formation.doors.arrive("coder", f"http://{CODER_DOOR}")
        response = await pending
    assert response.status_code == 400
    assert len(formation.net.to(CODER_DOOR)) == 1


# -- Step 3: the allow-list ------------------------------------------------------------

async def test_member_whose_grant_reaches_no_loopback_cannot_call_anyone() -> None:
    formation = Formation(allow=[OUTSIDE])
    async with formation.client() as client:
        with pytest.raises(EgressRefused) as refused:
            await client.get("http://coder.formation.invalid/")
    assert "localhost" in str(refused.value)
    assert "does not reach the door of member 'coder'," in str(refused.value)
    assert "4101" not in str(refused.value)           # the door URL stays the runtime's
    assert formation.net.opened == []


async def test_real_host_outside_the_grant_is_refused_before_connecting(
        formation: Formation) -> None:
    async with formation.client() as client:
        with pytest.raises(EgressRefused):
            await client.get("http://evil.example/")
        with pytest.raises(EgressRefused):
            await client.get("http://outside.example.evil.example/")
    assert formation.net.opened == []


@pytest.mark.parametrize(("entries", "url", "allowed"), [
    (["localhost"], "http://127.0.0.1:9/", True),
    (["localhost"], "http://127.45.6.7:9/", True),
    (["localhost"], "http://[::1]:9/", True),
    (["localhost"], "http://[::ffff:127.0.0.1]:9/", True),
    (["localhost"], "http://localhost:9/", True),
    (["localhost"], "http://localhost.:9/", True),
    (["localhost"], "http://128.0.0.1/", False),
    (["localhost"], "http://localhost.evil.example/", False),
    (["localhost"], "http://10.0.0.1/", False),
    (["127.0.0.1"], "http://127.0.0.1:5/", True),
    (["127.0.0.1"], "http://127.0.0.2:5/", False),
    (["[::1]"], "http://[::1]:5/", True),
    (["::1"], "http://[::1]:5/", True),
    (["api.example.com"], "https://API.example.com/", True),
    (["api.example.com"], "https://api.example.com.evil.example/", False),
    (["api.example.com"], "https://x.api.example.com/", False),
    (["*.example.com"], "https://x.example.com/", True),
    (["*.example.com"], "https://a.b.example.com/", True),
    (["*.example.com"], "https://example.com/", False),
    (["*.example.com"], "https://evilexample.com/", False),
    (["api.example.com:8443"], "https://api.example.com:8443/", True),
    (["api.example.com:8443"], "https://api.example.com/", False),
    (["localhost:8080"], "http://127.0.0.1:8080/", True),
    (["localhost:8080"], "http://127.0.0.1:8081/", False),
    (["*"], "https://anything.example/", True),
    ([], "http://127.0.0.1/", False),
])
def test_allow_list_matching(entries: list[str], url: str, allowed: bool) -> None:
    assert AllowList(entries).allows(httpx.URL(url)) is allowed


@pytest.mark.parametrize("entry", ["http://api.example.com", "a*b.example.com", "",
                                   "user@host", "host:99999", "**.example.com"])
def test_allow_entry_that_is_not_a_host_is_refused_naming_it(entry: str) -> None:
    with pytest.raises(ValueError, match="capabilities.network.allow"):
        AllowList([entry])


@pytest.mark.parametrize(("entries", "reaches"), [
    (["localhost"], True), (["127.0.0.1"], True), (["*"], True),
    (["api.example.com", "localhost"], True), (["127.0.0.1:8080"], False),
    (["localhost:8080"], False), (["::1"], False), (["api.example.com"], False), ([], False),
])
def test_egress_reaches_loopback_for_w_run_008(entries: list[str], reaches: bool) -> None:
    assert egress_reaches_loopback(entries) is reaches


# -- Step 4: headers -------------------------------------------------------------------

HEADER_TRICKS: list[tuple[str, list[tuple[str, str]]]] = [
    ("own_authorization", [("Authorization", "Bearer stolen-or-made-up")]),
    ("two_authorization_headers", [("Authorization", "Bearer a"), ("authorization", "b")]),
    ("trust_header_says_trusted", [("X-Murmur-Task-Trust", "trusted")]),
    ("origin_header_says_operator", [("X-Murmur-Task-Origin", "operator")]),
    ("underscore_origin", [("x_murmur_task_origin", "operator")]),
    ("underscore_trust", [("X_MURMUR_TASK_TRUST", "trusted")]),
    ("mixed_underscore_authorization", [("x-murmur_task-trust", "trusted")]),
    ("duplicate_trust_headers", [("x-murmur-task-trust", "trusted"),
                                 ("X-Murmur-Task-Trust", "trusted")]),
    ("connection_names_authorization_and_trust",
     [("Connection", "authorization, x-murmur-task-trust")]),
    ("other_runtime_header", [("X-Murmur-Task-Member", "entry")]),
    ("proxy_authorization", [("Proxy-Authorization", "Basic eDp5")]),
]


@pytest.mark.parametrize(("attack", "extra"), HEADER_TRICKS, ids=[t[0] for t in HEADER_TRICKS])
async def test_header_trick_leaves_exactly_one_token_origin_peer_and_true_trust(
        formation: Formation, attack: str, extra: list[tuple[str, str]]) -> None:
    async with formation.client() as client:
        await client.post("http://coder.formation.invalid/", json={},
                          headers=extra + [("X-Kept", "yes")])
    [sent] = formation.coder.seen
    assert sent.values("authorization") == [f"Bearer {CODER_TOKEN}"]
    assert sent.values("x-murmur-task-origin") == ["peer"]
    assert sent.values("x-murmur-task-trust") == ["untrusted"]
    assert not [key for key, _ in sent.headers if "_" in key]
    assert sent.values("proxy-authorization") == []
    assert sent.values("x-murmur-task-member") == []
    assert sent.values("x-kept") == ["yes"]


async def test_connection_header_and_every_header_it_names_are_dropped(
        formation: Formation) -> None:
    headers = [("Connection", "keep-alive, X-Secret"), ("Keep-Alive", "timeout=5"),
               ("X-Secret", "s"), ("TE", "trailers"), ("Trailer", "X-T"),
               ("Upgrade", "websocket"), ("Proxy-Connection", "keep-alive")]
    async with formation.client() as client:
        await client.post("http://coder.formation.invalid/", json={}, headers=headers)
    [sent] = formation.coder.seen
    names = {key for key, _ in sent.headers}
    assert not names & {"x-secret", "keep-alive", "te", "trailer", "upgrade",
                        "proxy-connection"}
    assert sent.values("connection") in ([], ["keep-alive"])  # our hop only, not theirs


async def test_transfer_encoding_and_content_length_are_recomputed_for_the_body(
        formation: Formation) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"jsonrpc": "2.0", '
        yield b'"id": 1}'
    async with formation.client() as client:
        await client.post("http://coder.formation.invalid/", content=chunks(),
                          headers={"Transfer-Encoding": "chunked"})
        await client.post("http://coder.formation.invalid/", content=b'{"id": 2}',
                          headers={"Content-Length": "9", "X-Content-Length": "1"})
    first, second = formation.coder.seen
    assert first.body == {"jsonrpc": "2.0", "id": 1}
    assert first.values("content-length") == ["27"]
    assert first.values("transfer-encoding") == []
    assert second.body == {"id": 2}


@pytest.mark.parametrize(("trust", "seen"), [("trusted", "trusted"), ("untrusted", "untrusted"),
                                             (None, "untrusted"), ("TRUSTED", "untrusted"),
                                             ("operator", "untrusted")])
async def test_trust_class_of_the_running_task_is_stamped(trust: str | None, seen: str) -> None:
    formation = Formation(trust=trust)
    async with formation.client() as client:
        await client.post("http://coder.formation.invalid/", json={},
                          headers={"X-Murmur-Task-Trust": "trusted"})
    assert formation.coder.seen[0].values("x-murmur-task-trust") == [seen]


async def test_with_trust_view_stamps_its_own_class_and_shares_the_pool(
        formation: Formation) -> None:
    view = formation.transport.with_trust("trusted")
    async with FormationClient(transport=view) as client:
        await client.post("http://coder.formation.invalid/", json={})
    assert formation.coder.seen[0].values("x-murmur-task-trust") == ["trusted"]
    assert not formation.net.closed          # closing a view leaves the pool open
    await formation.transport.aclose()
    assert formation.net.closed


async def test_real_host_request_keeps_its_own_authorization_and_gets_no_token(
        formation: Formation) -> None:
    async with formation.client() as client:
        await client.post(f"http://{OUTSIDE}/", json={},
                          headers={"Authorization": "Bearer sk-its-own",
                                   "X-Murmur-Task-Trust": "trusted"})
    [sent] = formation.outside.seen
    assert sent.values("authorization") == ["Bearer sk-its-own"]
    assert sent.values("x-murmur-task-trust") == []
    assert formation.token_sent_to() == set()
    assert formation.calls == []


async def test_direct_request_to_a_callees_real_door_carries_no_token(
        formation: Formation) -> None:
    async with formation.client() as client:
        await client.post(f"http://{CODER_DOOR}/", json={})
    assert formation.coder.seen[0].values("authorization") == []
    assert formation.token_sent_to() == set()


# -- Step 5: redirects -----------------------------------------------------------------

def _redirecting_formation(location: str) -> Formation:
    return Formation(doors={CODER_DOOR: FakeDoor(redirect_to=location)})


async def test_redirect_is_returned_as_is_and_not_followed() -> None:
    formation = _redirecting_formation(f"http://{REVIEWER_DOOR}/")
    async with formation.client() as client:
        response = await client.post("http://coder.formation.invalid/", json={})
    assert response.status_code == 307
    assert formation.net.to(REVIEWER_DOOR) == []


async def test_redirect_to_another_members_door_never_carries_the_token() -> None:
    formation = _redirecting_formation(f"http://{REVIEWER_DOOR}/steal")
    async with formation.client(follow_redirects=True) as client:
        await client.post("http://coder.formation.invalid/", json={})
    [followed] = formation.reviewer.seen
    assert followed.values("authorization") == []
    assert followed.values("x-murmur-task-origin") == []
    assert formation.token_sent_to() == {CODER_DOOR}


async def test_redirect_to_an_outside_address_never_carries_the_token() -> None:
    formation = _redirecting_formation(f"http://{OUTSIDE}/collect")
    async with formation.client(follow_redirects=True) as client:
        response = await client.get("http://coder.formation.invalid/",
                                    headers={"Authorization": "Bearer its-own"})
    assert response.status_code == 400
    [followed] = formation.outside.seen
    assert followed.values("authorization") == []
    assert formation.token_sent_to() == {CODER_DOOR}


async def test_redirect_to_a_disallowed_outside_address_is_refused_by_the_allow_list() -> None:
    formation = _redirecting_formation("http://evil.example/collect")
    async with formation.client(follow_redirects=True) as client:
        with pytest.raises(EgressRefused):
            await client.get("http://coder.formation.invalid/")
    assert formation.token_sent_to() == {CODER_DOOR}
    assert len(formation.net.opened) == 1


async def test_redirect_to_another_callees_virtual_address_is_refused_confused_deputy() -> None:
    formation = _redirecting_formation("http://reviewer.formation.invalid/")
    async with formation.client(follow_redirects=True) as client:
        with pytest.raises(FormationRefused):
            await client.post("http://coder.formation.invalid/", json={})
    assert formation.reviewer.seen == []
    assert formation.token_sent_to() == {CODER_DOOR}


async def test_redirect_back_to_the_same_virtual_address_is_refused() -> None:
    formation = _redirecting_formation("/elsewhere")
    async with formation.client(follow_redirects=True) as client:
        with pytest.raises(FormationRefused):
            await client.get("http://coder.formation.invalid/")
    assert len(formation.net.to(CODER_DOOR)) == 1


async def test_an_outside_host_redirecting_to_a_virtual_address_never_gets_a_token_sent(
        ) -> None:
    # Regression: a redirect answered by an allowed real host was followed to a virtual
    # address with the formation token attached, so any outside host a member may reach
    # could make it call a member on the host's behalf.
    formation = Formation(doors={OUTSIDE: FakeDoor(
        redirect_to="http://coder.formation.invalid/")})
    async with formation.client(follow_redirects=True) as client:
        with pytest.raises(FormationRefused):
            await client.get(f"http://{OUTSIDE}/")
    assert formation.coder.seen == []
    assert formation.token_sent_to() == set()


# -- The token stays the runtime's -----------------------------------------------------

async def test_repr_and_refusals_never_show_a_token(formation: Formation) -> None:
    assert CODER_TOKEN not in repr(formation.transport)
    assert "coder" in repr(formation.transport)
    assert "mft1" not in repr(formation.transport.with_trust("trusted"))


async def test_failed_connection_exposes_neither_token_nor_door_request() -> None:
    formation = Formation()
    formation.doors.urls["coder"] = "http://127.0.0.1:4999"       # nobody listens
    async with formation.client() as client:
        with pytest.raises(httpx.ConnectError) as failed:
            await client.get("http://coder.formation.invalid/")
    error = failed.value
    assert str(error.request.url) == "http://coder.formation.invalid/"
    assert "authorization" not in error.request.headers
    assert error.__cause__ is None and error.__context__ is None
    assert CODER_TOKEN not in str(error)


async def test_token_echoed_in_an_inner_error_message_is_scrubbed() -> None:
    class Echoing(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            raise httpx.LocalProtocolError(f"bad header {request.headers['authorization']}",
                                           request=request)
    transport = FormationTransport(Echoing(), tokens=TOKENS, doors=Doors(
        {"coder": f"http://{CODER_DOOR}"}), allow=ALLOW)
    async with FormationClient(transport=transport) as client:
        with pytest.raises(httpx.LocalProtocolError) as failed:
            await client.get("http://coder.formation.invalid/")
    assert CODER_TOKEN not in str(failed.value)
    assert "[token]" in str(failed.value)


async def test_trace_extension_never_reaches_the_inner_transport(formation: Formation) -> None:
    seen: list[Any] = []
    async with formation.client() as client:
        await client.get("http://coder.formation.invalid/",
                         extensions={"trace": lambda *args: seen.append(args)})
    [request] = formation.net.opened
    assert "trace" not in request.extensions
    assert "timeout" in request.extensions


def test_callee_names_must_be_member_names() -> None:
    with pytest.raises(ValueError, match="member name"):
        FormationTransport(FakeNet({}), tokens={"Bad.Name": "t"}, doors=Doors({}), allow=[])


async def test_task_http_keeps_cookies_an_outside_host_sets() -> None:
    seen: list[list[str]] = []

    async def cookie_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append([v.decode() for k, v in scope["headers"] if k == b"cookie"])
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"set-cookie", b"session=abc; Path=/")]})
        await send({"type": "http.response.body", "body": b"ok"})

    formation = Formation(doors={OUTSIDE: cookie_app})
    async with formation.client() as client:
        await client.get(f"http://{OUTSIDE}/")
        await client.get(f"http://{OUTSIDE}/again")
    assert seen == [[], ["session=abc"]]


def test_token_that_is_not_header_text_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValueError) as refused:
        FormationTransport(FakeNet({}), tokens={"coder": "mft1.é\r\nX-Evil: 1"},
                           doors=Doors({}), allow=[])
    assert "coder" in str(refused.value) and "Evil" not in str(refused.value)
