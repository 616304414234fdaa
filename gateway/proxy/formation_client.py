"""The client components use: ``FormationClient``, an ``httpx.AsyncClient`` that vets
the URL text it is given.

In order: :class:`_Cookies`, httpx's cookie jar without its costliest no-op;
:class:`FormationClient`, which refuses a URL text naming ``formation.invalid`` in any
but the exact form (:func:`~gateway.proxy.virtual_names.check_raw_url`) before httpx
normalizes it, and follows no redirect unless asked. ``task.http`` is one, on the
member's ``FormationTransport``, which repeats every check it still can.
"""

from __future__ import annotations

from typing import Any

import httpx

from gateway.proxy.proxy_errors import FormationRefused
from gateway.proxy.virtual_names import check_raw_url, names_formation


class _Cookies(httpx.Cookies):
    """httpx's cookie jar, minus its most expensive no-op: parsing a response that sets
    no cookie (a quarter of a client's CPU per JSON-RPC call)."""

    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


class FormationClient(httpx.AsyncClient):
    """An ``httpx.AsyncClient`` that also vets the URL *text* it is given (see
    :func:`check_raw_url`) before httpx normalizes it; ``task.http`` is one."""

    def __init__(self, *, transport: httpx.AsyncBaseTransport, **kwargs: Any) -> None:
        base_url = kwargs.get("base_url")
        if isinstance(base_url, str):
            check_raw_url(base_url)
        kwargs.setdefault("follow_redirects", False)
        super().__init__(transport=transport, **kwargs)
        self._cookies = _Cookies(self._cookies)

    def build_request(self, method: str, url: httpx.URL | str, **kwargs: Any) -> httpx.Request:
        if isinstance(url, str):
            try:
                check_raw_url(url)
            except FormationRefused:
                raise FormationRefused(self._request_or_none(method, url)) from None
        try:
            return super().build_request(method, url, **kwargs)
        except (httpx.InvalidURL, UnicodeError):
            # A name httpx cannot even parse (bad punycode such as xn--coder-) under
            # formation.invalid gets the one refusal too, never a parser's error.
            if names_formation(str(url)):
                raise FormationRefused(None) from None
            raise

    def _request_or_none(self, method: str, url: str) -> httpx.Request | None:
        """The refused request, for the exception's ``request``, when httpx can parse it."""
        try:
            return super().build_request(method, url)
        except (httpx.InvalidURL, ValueError, TypeError):
            return None
