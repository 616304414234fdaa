"""Push notification configurations (A2A 1.0 sections 3.1.7-3.1.10): what a task's owner
asked to be told, and where.

In this order: a configuration is read from the caller's ``TaskPushNotificationConfig``
(:func:`read_config`: the URL on the door's allow-list, bounded sizes, and its token,
scheme and credentials never a credential the door accepts, :class:`DoorCredentials`:
each compared as it is written and with a leading scheme word and surrounding space
removed), kept per task with the owner who set it (:class:`PushConfigs`: at most
:data:`MAX_PER_TASK` a task, :data:`MAX_PER_CALLER` an owner, :data:`MAX_PER_DOOR` in
all), shown only to that owner, until it is deleted or the door forgets its task. Past
a bound, what receives nothing more goes first: an owner at its bound loses its own
oldest configuration of a task no longer followed (ended or forgotten), the door at its
bound those of forgotten tasks; then the configuration is refused. An ended task's
configurations are still read, listed and deleted; nothing more is sent to them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gateway.a2a.jsonrpc import RpcError
from gateway.proxy.egress import AllowList, default_port

if TYPE_CHECKING:
    from gateway.auth.door_auth import AuthPolicy

__all__ = ["MAX_PER_CALLER", "MAX_PER_DOOR", "MAX_PER_TASK", "DoorCredentials", "IsDoorSecret",
           "PushConfig", "PushConfigs", "read_config", "unwrapped"]

MAX_PER_TASK = 8
#: One owner's configurations, live or ended tasks together (docs/limits.md, Push): one
#: caller cannot fill the door's 1,024 and leave another none.
MAX_PER_CALLER = 32
MAX_PER_DOOR = 1024
_MAX_URL = 2048
_MAX_SECRET = 4096
_MAX_ID = 256
_FORMATION_PREFIX = "mft1."

#: Whether a text is a credential the door accepts (see :class:`DoorCredentials`).
IsDoorSecret = Callable[[str], bool]


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


class DoorCredentials:
    """Every credential a door accepts, as a test of a text: its operator token, a
    formation token (any ``mft1.`` token: a door in a formation verifies them; none is
    ever a webhook's), each declared bearer token, and a JWT one of its declared issuers
    accepts. Token comparisons are in constant time (the credentials' own ``matches``)."""

    __slots__ = ("_policy",)

    def __init__(self, policy: AuthPolicy | None) -> None:
        self._policy = policy

    def __call__(self, text: str) -> bool:
        if text.startswith(_FORMATION_PREFIX):
            return True
        policy = self._policy
        if policy is None:
            return False
        if policy.operator is not None and policy.operator.matches(text):
            return True
        if any(bearer.matches(text) for bearer in policy.bearers):
            return True
        # Only a text shaped as a JWT (three dot-separated parts) is given to an issuer:
        # no signature check is spent on anything else.
        return text.count(".") == 2 and any(issuer.accepts(text)
                                            for issuer in policy.jwt_issuers)


def unwrapped(text: str) -> list[str]:
    """The forms of ``text`` a receiver could use as a credential: ``text`` without the
    space around it, and when it is a word followed by more, what follows that leading
    word (a scheme such as ``Bearer``, ``Basic`` or ``Token``, in any case), without
    the space around it. A door credential never holds a space, so a form with one
    left inside is no door credential as it is written."""
    stripped = text.strip()
    forms = [stripped] if stripped else []
    parts = stripped.split(None, 1)
    if len(parts) == 2:
        forms.append(parts[1].strip())
    return forms


def read_config(params: dict[str, Any], task_id: str, owner: str, allow: AllowList,
                is_door_secret: IsDoorSecret) -> PushConfig:
    """A caller's configuration for ``task_id``, or ``-32602`` naming what is wrong.
    ``is_door_secret(text)``: whether ``text`` is a credential the door accepts
    (:class:`DoorCredentials`); a formation token is refused whatever it says."""
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
    for field, secret in (("token", token), ("authentication.scheme", scheme),
                          ("authentication.credentials", credentials)):
        if secret is not None and any(
                form.startswith(_FORMATION_PREFIX) or is_door_secret(form)
                for form in unwrapped(secret)):
            # A webhook is someone else's server: the door's credentials never go there,
            # bare or behind a scheme word. The text names the field, never the value.
            raise RpcError("INVALID_PARAMS", f"{field}: a push notification never carries a "
                                             "formation or operator token, nor any other "
                                             "credential this door accepts")
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
    """The configurations of a door's tasks, by task, each with its owner, and by owner
    in the order they were made (see the module text for the bounds). A configuration
    is named by its owner and id: two owners' ids never meet."""

    def __init__(self, max_per_caller: int = MAX_PER_CALLER) -> None:
        self._by_task: dict[str, dict[tuple[str, str], PushConfig]] = {}
        #: Each owner's configurations, oldest first, by (task id, configuration id).
        self._by_owner: dict[str, dict[tuple[str, str], PushConfig]] = {}
        self._count = 0
        self.max_per_caller = max_per_caller

    def add(self, config: PushConfig, known: Callable[[str], bool] | None = None,
            followed: Callable[[str], bool] | None = None) -> PushConfig:
        """Keep ``config`` (its owner's with the same id replaces it). ``known(task_id)``:
        whether the door still holds a task, to drop the configurations of those it
        forgot; ``followed(task_id)``: whether a task is still followed (live), to drop
        the owner's configurations of ended tasks when the owner is at its bound."""
        key = (config.owner, config.id)
        if key not in self._by_task.get(config.task_id, {}):
            self._make_room(config, known, followed)
            self._count += 1
        self._by_task.setdefault(config.task_id, {})[key] = config
        self._by_owner.setdefault(config.owner, {})[(config.task_id, config.id)] = config
        return config

    def _make_room(self, config: PushConfig, known: Callable[[str], bool] | None,
                   followed: Callable[[str], bool] | None) -> None:
        """Refuse ``config`` past a bound, after dropping what receives nothing more."""
        if len(self._by_task.get(config.task_id, {})) >= MAX_PER_TASK:
            raise RpcError("INVALID_PARAMS", f"a task takes at most {MAX_PER_TASK} push "
                                             "notification configurations")
        owned = self._by_owner.get(config.owner, {})
        if len(owned) >= self.max_per_caller and followed is not None:
            for old in list(owned.values()):     # oldest first
                if not followed(old.task_id):
                    self.delete(old.task_id, old.id, old.owner)
                    break
        if len(owned) >= self.max_per_caller:
            raise RpcError(
                "INVALID_PARAMS",
                f"this caller holds {self.max_per_caller} push notification configurations "
                "on tasks still running, the most one caller may (push configurations per "
                "caller, docs/limits.md); delete one, or wait for one of those tasks to end",
                metadata={"limit": "push_configs_per_caller",
                          "max": str(self.max_per_caller)})
        if self._count >= MAX_PER_DOOR and known is not None:
            for task_id in [task for task in self._by_task if not known(task)]:
                self.task_forgotten(task_id)
        if self._count >= MAX_PER_DOOR:
            raise RpcError("MEMBER_BUSY", f"this door holds {MAX_PER_DOOR} push notification "
                                          "configurations; try again when tasks have ended")

    def get(self, task_id: str, config_id: str, owner: str) -> PushConfig:
        config = self._by_task.get(task_id, {}).get((owner, config_id))
        if config is None:
            raise RpcError("TASK_NOT_FOUND", "no such push notification configuration")
        return config

    def of_task(self, task_id: str, owner: str | None = None) -> list[PushConfig]:
        """The task's configurations (``owner``'s only, when given)."""
        return [config for config in self._by_task.get(task_id, {}).values()
                if owner is None or config.owner == owner]

    def held_by(self, owner: str) -> int:
        """How many configurations ``owner`` holds."""
        return len(self._by_owner.get(owner, {}))

    def delete(self, task_id: str, config_id: str, owner: str) -> None:
        """Remove one configuration; removing one that is gone is no error."""
        configs = self._by_task.get(task_id, {})
        config = configs.pop((owner, config_id), None)
        if config is not None:
            self._count -= 1
            self._disown(config)
        if not configs:
            self._by_task.pop(task_id, None)

    def task_forgotten(self, task_id: str) -> None:
        configs = self._by_task.pop(task_id, {})
        self._count -= len(configs)
        for config in configs.values():
            self._disown(config)

    def _disown(self, config: PushConfig) -> None:
        owned = self._by_owner.get(config.owner)
        if owned is not None:
            owned.pop((config.task_id, config.id), None)
            if not owned:
                del self._by_owner[config.owner]
