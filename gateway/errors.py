"""The gateway's exceptions: one root, so a caller can catch everything the wire layer
raises on purpose with one ``except``, and the tree (as httpx draws its own):

    GatewayError
    ├── InvalidToken ................ tokens: a formation token refused (names the rule,
    │                                 never the token)
    ├── CredentialError ............. credentials: a credential configured wrongly
    │                                 (also a ValueError)
    ├── BodyTooLarge ................ http_io, auth: a request body past the door's bound
    ├── Refused ..................... auth.refusals: DoorAuth refuses a request, by its
    │                                 row of the refusal table
    ├── RpcError .................... a2a.jsonrpc: a JSON-RPC error answer, by its table row
    │   └── UpstreamError ........... relay.client: a gateway member's upstream's own
    │                                 JSON-RPC error, passed through as it came
    ├── UpstreamCardError ........... relay.client: an upstream's card no door can stand
    │                                 in front of (no interface the door speaks, no card)
    ├── V03AnswerError .............. a2a.v03: an A2A 0.3 upstream's answer that is not
    │                                 0.3 (also a ValueError; the relay makes it -32603)
    ├── RequestError ................ a2a.jsonrpc: a request that cannot be served, with
    │                                 its id
    ├── TaskEndedError .............. door.tasks: an agent reported on a task that has
    │                                 ended (also a RuntimeError)
    ├── CallFailed .................. proxy.call_failed: a call to a member gave no answer
    ├── RpcErrorReply ............... proxy.member_rpc: a callee's JSON-RPC error, which
    │                                 call-member maps and never lets out
    ├── RateLimited ................. proxy.member_rpc: a callee's 429 rate_limited,
    │                                 which call-member waits out
    ├── StreamFailed ................ proxy.member_rpc: a call's stream cannot be used
    │                                 (the call falls back to polling)
    ├── ForwardAnswer ............... proxy.forward_request: an answer the forward proxy
    │                                 gives itself (Proxy-Status: murmur)
    ├── PushRefused ................. push.delivery: a webhook the door will not send to
    │                                 (off the allow-list, resolving inside, a redirect)
    ├── MalformedHead ............... proxy.http_head: a head the forward proxy will not
    │                                 read (also a ValueError)
    ├── HopFailed ................... proxy.door_hop: the forward proxy's hop could not
    │                                 reach a door or read its answer
    └── ProxyError .................. proxy.proxy_errors: the formation proxy refused or
        │                             could not reach (also an httpx.TransportError,
        │                             so an httpx caller sees a transport failure)
        ├── FormationRefused ........ a virtual address this member may not use
        ├── EgressRefused ........... a real URL outside capabilities.network.allow
        ├── CallLimitReached ........ the member made its limits.calls (roster v2)
        ├── ModelBoundReached ....... proxy.inference: a model member's endpoint request
        │                             refused at egress (no key, a count past its bound)
        └── DoorUnavailable ......... a callee's door address did not arrive in time

Each exception is defined in the module that raises it (the proxy's need httpx, which
this module never imports); every one derives from :class:`GatewayError`, and so do the
private ones a module raises and catches itself. The launcher has its own tree, drawn in
``launcher/errors.py``.
"""

from __future__ import annotations


class GatewayError(Exception):
    """The root of every exception the gateway raises on purpose."""
