"""Push notifications (A2A 1.0 sections 3.1.7-3.1.10, 4.3 and 13.2), in the order an
event meets them:

* :mod:`gateway.push.notifications`: the four configuration methods, and the pump that
  follows each task with a configuration;
* :mod:`gateway.push.configs`: the configurations, per task and owner, read and bounded;
* :mod:`gateway.push.delivery`: the door's one worker that POSTs each event to each
  webhook, on the allow-list, pinned to the address it checked, never redirected,
  retried with backoff, every try a ``push_delivery`` record.

A door sends push notifications only when its manifest allows webhooks somewhere
(``network.push.allow``, docs/push.md); a gateway member's tasks are its upstream's, and
it sends none.
"""
