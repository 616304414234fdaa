"""Push notification configurations (A2A 1.0 sections 3.1.7-3.1.10): what a task's owner
asked to be told, and where.

In this order: a configuration is read from the caller's ``TaskPushNotificationConfig``
(:func:`read_config`: the URL on the door's allow-list, its token and credentials never a
formation or operator token, bounded sizes), kept per task with the owner who set it
(:class:`PushConfigs`: at most :data:`MAX_PER_TASK` a task and :data:`MAX_PER_DOOR` in
all), shown only to that owner, until it is deleted or the door forgets its task (past
the bound, those of forgotten tasks are dropped first). An ended task's configurations
are still read, listed and deleted; nothing more is sent to them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gateway.a2a.jsonrpc import RpcError
from gateway.proxy.egress import AllowList, default_port

__all__ = ["MAX_PER_DOOR", "MAX_PER_TASK", "PushConfig", "PushConfigs", "read_config"]

MAX_PER_TASK = 8
MAX_PER_DOOR = 1024
_MAX_URL = 2048
_MAX_SECRET = 4096
_MAX_ID = 256
_FORMATION_PREFIX = "mft1."


@dataclass(frozen=True, slots=True)
class PushConfig:
    """One configuration: where a task's events go, with what the receiver checks."""

    id: str
    task_id: str
    url: str
    owner: str
    token: str | None = None
    scheme: str | None = None
    credentials: str | None = None

    def wire(self) -> dict[str, Any]:
        """The ``TaskPushNotificationConfig`` its owner reads back (the credentials
        included: they are the owner's own)."""
        config: dict[str, Any] = {"id": self.id, "taskId": self.task_id, "url": self.url}
        if self.token is not None:
            config["token"] = self.token
        if self.scheme is not None:
            authentication = {"scheme": self.scheme}
            if self.credentials is not None:
                authentication["credentials"] = self.credentials
            config["authentication"] = authentication
        return config

    @property
    def shown_url(self) -> str:
        """The URL as records show it: scheme, host, port and path, never its query."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


def read_config(params: dict[str, Any], task_id: str, owner: str, allow: AllowList,
                is_door_secret: Any) -> PushConfig:
    """A caller's configuration for ``task_id``, or ``-32602`` naming what is wrong.
    ``is_door_secret(text)``: whether ``text`` is the door's operator token."""
    url = params.get("url")
    if not isinstance(url, str) or not url or len(url) > _MAX_URL:
        raise RpcError("INVALID_PARAMS", "url: the webhook's http or https URL")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RpcError("INVALID_PARAMS", "url: an http or https URL with a host")
    if parts.username is not None or parts.password is not None:
        raise RpcError("INVALID_PARAMS", "url: credentials go in authentication, not the URL")
    try:
        port = parts.port or default_port(parts.scheme)
    except ValueError:
        raise RpcError("INVALID_PARAMS", "url: its port is not a number") from None
    if not allow.allows_host(parts.hostname, port):
        raise RpcError("INVALID_PARAMS", f"url: {parts.hostname}:{port} is not on this "
                                         "door's network.push.allow")
    token = _text(params.get("token"), "token")
    authentication = params.get("authentication")
    scheme = credentials = None
    if authentication is not None:
        if not isinstance(authentication, dict):
            raise RpcError("INVALID_PARAMS", "authentication: {scheme, credentials}")
        scheme = _text(authentication.get("scheme"), "authentication.scheme")
        credentials = _text(authentication.get("credentials"), "authentication.credentials")
        if scheme is None or not scheme.isascii() or not scheme.isalnum():
            raise RpcError("INVALID_PARAMS", "authentication.scheme: an HTTP scheme such as "
                                             "Bearer or Basic")
    for secret in (token, credentials):
        if secret is not None and (secret.startswith(_FORMATION_PREFIX)
                                   or is_door_secret(secret)):
            # A webhook is someone else's server: the door's credentials never go there.
            raise RpcError("INVALID_PARAMS", "a push notification never carries a formation "
                                             "or operator token")
    config_id = params.get("id")
    if config_id is not None and (not isinstance(config_id, str) or len(config_id) > _MAX_ID):
        raise RpcError("INVALID_PARAMS", f"id: text of at most {_MAX_ID} characters")
    return PushConfig(config_id or uuid.uuid4().hex, task_id, url, owner, token, scheme,
                      credentials)


def _text(value: Any, field: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > _MAX_SECRET or any(
            character in value for character in "\r\n\x00"):
        raise RpcError("INVALID_PARAMS", f"{field}: one line of text")
    return value


class PushConfigs:
    """The configurations of a door's tasks, by task, each with its owner."""

    def __init__(self) -> None:
        self._by_task: dict[str, dict[str, PushConfig]] = {}
        self._count = 0

    def add(self, config: PushConfig, known: Any = None) -> PushConfig:
        """Keep ``config`` (one with the same id replaces it). ``known(task_id)``: whether
        the door still holds a task, to drop the configurations of those it forgot."""
        if self._count >= MAX_PER_DOOR and known is not None:
            for task_id in [task for task in self._by_task if not known(task)]:
                self.task_forgotten(task_id)
        configs = self._by_task.setdefault(config.task_id, {})
        replacing = config.id in configs
        if not replacing and len(configs) >= MAX_PER_TASK:
            raise RpcError("INVALID_PARAMS", f"a task takes at most {MAX_PER_TASK} push "
                                             "notification configurations")
        if not replacing and self._count >= MAX_PER_DOOR:
            raise RpcError("MEMBER_BUSY", f"this door holds {MAX_PER_DOOR} push notification "
                                          "configurations; try again when tasks have ended")
        configs[config.id] = config
        self._count += 0 if replacing else 1
        return config

    def get(self, task_id: str, config_id: str, owner: str) -> PushConfig:
        config = self._by_task.get(task_id, {}).get(config_id)
        if config is None or config.owner != owner:
            raise RpcError("TASK_NOT_FOUND", "no such push notification configuration")
        return config

    def of_task(self, task_id: str, owner: str | None = None) -> list[PushConfig]:
        """The task's configurations (``owner``'s only, when given)."""
        return [config for config in self._by_task.get(task_id, {}).values()
                if owner is None or config.owner == owner]

    def delete(self, task_id: str, config_id: str, owner: str) -> None:
        """Remove one configuration; removing one that is gone is no error."""
        configs = self._by_task.get(task_id, {})
        config = configs.get(config_id)
        if config is not None and config.owner == owner:
            del configs[config_id]
            self._count -= 1
        if not configs:
            self._by_task.pop(task_id, None)

    def task_forgotten(self, task_id: str) -> None:
        self._count -= len(self._by_task.pop(task_id, {}))
