"""A door's push notifications: the four configuration methods and the following of
each task that has a configuration.

In this order: a method finds the task as its caller sees it (another caller's task,
or one of its configurations, is ``-32001``, as for GetTask), then reads, keeps, shows
or deletes the configuration (:mod:`gateway.push.configs`: its credentials never one the
door accepts; at most so many a task, a caller and the door). The first configuration
of a live task starts its pump: subscribed to the task in the same step (no event is
missed), it hands the Task as it is, then every event until the task ends, to the
delivery (:mod:`gateway.push.delivery`) once for each configuration the task has at
that moment; each configuration's webhook gets its events in order, on a lane of its
own, so one that hangs holds back no other.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gateway.a2a.jsonrpc import RpcError
from gateway.a2a.models import (
    ListPushConfigsRequest,
    PushConfigRequest,
    TaskPushNotificationConfig,
)
from gateway.caller import Caller
from gateway.door.methods import validate_params
from gateway.door.task_record import TaskRecord
from gateway.door.tasks import TaskStore
from gateway.protocol import TERMINAL_STATES
from gateway.proxy.egress import AllowList
from gateway.push.configs import IsDoorSecret, PushConfig, PushConfigs, read_config
from gateway.push.delivery import DeliveryPolicy, PushDelivery, Resolve
from gateway.trace.bus import TraceBus

if TYPE_CHECKING:
    from gateway.metrics import DoorMetrics

__all__ = ["PushNotifications"]


class PushNotifications:
    """The push notifications of a door whose tasks run here (see the module text)."""

    def __init__(self, store: TaskStore, allow: AllowList, trace: TraceBus, *,
                 is_door_secret: IsDoorSecret | None = None,
                 policy: DeliveryPolicy | None = None, resolve: Resolve | None = None,
                 metrics: DoorMetrics | None = None) -> None:
        self._store = store
        self._allow = allow
        self._is_door_secret: IsDoorSecret = is_door_secret or (lambda _text: False)
        self.configs = PushConfigs()
        self.delivery = PushDelivery(allow, trace, policy, resolve, metrics=metrics)
        self._pumps: dict[str, asyncio.Task[None]] = {}

    # --- the four methods ---------------------------------------------------------------

    async def create(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        """CreateTaskPushNotificationConfig: a TaskPushNotificationConfig in, the same
        with its ``id`` out."""
        request = validate_params(TaskPushNotificationConfig, params)
        if request.task_id is None:
            raise RpcError("INVALID_PARAMS", "taskId: Field required")
        record = self._store.visible(request.task_id, caller)
        return self.watch(record, params, caller).wire()

    async def get(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        request = validate_params(PushConfigRequest, params)
        record = self._store.visible(request.task_id, caller)
        return self.configs.get(record.id, request.id, caller.credential.owner).wire()

    async def list(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        request = validate_params(ListPushConfigsRequest, params)
        record = self._store.visible(request.task_id, caller)
        return {"configs": [config.wire() for config in
                            self.configs.of_task(record.id, caller.credential.owner)]}

    async def delete(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        request = validate_params(PushConfigRequest, params)
        record = self._store.visible(request.task_id, caller)
        self.configs.delete(record.id, request.id, caller.credential.owner)
        return {}

    # --- following tasks ----------------------------------------------------------------

    def check(self, params: dict[str, Any], caller: Caller) -> None:
        """Refuse (``-32602``) a configuration given with a SendMessage before the task
        it is for is made."""
        validate_params(TaskPushNotificationConfig, params)
        read_config(params, "-", caller.credential.owner, self._allow, self._is_door_secret)

    def watch(self, record: TaskRecord, params: dict[str, Any], caller: Caller) -> PushConfig:
        """Keep the configuration ``params`` for ``record`` and follow the task, when it
        is live, from now on. Call it in the step that made or found the task."""
        config = read_config(params, record.id, caller.credential.owner, self._allow,
                             self._is_door_secret)
        # A task with a pump is live; a caller at its bound gives up one of its
        # configurations of a task without one (ended or forgotten) before it is refused.
        self.configs.add(config, known=self._store.known, followed=self._pumps.__contains__)
        if record.id not in self._pumps and record.state not in TERMINAL_STATES:
            queue = self._store.subscribe(record)
            first = {"task": record.snapshot()}
            self._pumps[record.id] = asyncio.get_running_loop().create_task(
                self._pump(record, queue, first), name=f"murmur-push-{record.id[:16]}")
        return config

    async def _pump(self, record: TaskRecord, queue: asyncio.Queue[Any],
                    first: dict[str, Any]) -> None:
        try:
            self._hand_over(record.id, first)
            while True:
                event = await queue.get()
                if event is None:
                    return
                self._hand_over(record.id, event)
                update = event.get("statusUpdate")
                if update is not None and update["status"]["state"] in TERMINAL_STATES:
                    return
        finally:
            self._store.unsubscribe(record, queue)
            self._pumps.pop(record.id, None)

    def _hand_over(self, task_id: str, event: dict[str, Any]) -> None:
        for config in self.configs.of_task(task_id):
            self.delivery.send(config, event)

    async def aclose(self, grace: float = 2.0) -> None:
        """Stop following tasks; what is queued has ``grace`` seconds to go out."""
        for pump in list(self._pumps.values()):
            pump.cancel()
        await self.delivery.aclose(grace)

