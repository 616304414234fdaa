"""How an agent's environment names its member's forward proxy (standard library only, so
a member names its proxy before it imports the proxy, and httpx with it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gateway.protocol import PROXY_ENV

#: Where the agent's environment names the proxy: the four ``*_PROXY`` variables for
#: every HTTP client, ``MURMUR_PROXY`` for murmur-aware agents.
PROXY_VARIABLES: Final = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", PROXY_ENV)
#: Removed from the agent's environment in any case (Python's urllib reads proxy
#: variables case-insensitively): nothing may exempt a host from the proxy or name
#: another proxy.
_REMOVED_VARIABLES: Final = frozenset(
    {"no_proxy", "all_proxy"} | {name.lower() for name in PROXY_VARIABLES})
#: The user name of the proxy's Basic credential (the password is its secret).
USER: Final = "murmur"


def proxy_url(secret: str, port: int) -> str:
    """``http://murmur:<secret>@127.0.0.1:<port>``."""
    return f"http://{USER}:{secret}@127.0.0.1:{port}"


def proxy_environment(env: Mapping[str, str], proxy_url: str) -> dict[str, str]:
    """``env`` as the agent gets it: ``NO_PROXY``, ``ALL_PROXY`` and the five proxy
    variables removed in every case, then the five set to ``proxy_url``."""
    kept = {name: value for name, value in env.items()
            if name.lower() not in _REMOVED_VARIABLES}
    kept.update(dict.fromkeys(PROXY_VARIABLES, proxy_url))
    return kept
