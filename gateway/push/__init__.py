"""Push notifications (A2A 1.0 sections 3.1.7-3.1.10, 4.3 and 13.2), in the order an
event meets them:

* :mod:`gateway.push.notifications`: the four configuration methods, and the pump that
  follows each task with a configuration;
* :mod:`gateway.push.configs`: the configurations, per task and owner, read (never a
  credential the door accepts, bare or behind a scheme word) and bounded (a task, a
  caller, the door);
* :mod:`gateway.push.delivery`: a lane per configuration that POSTs its events in order
  to its webhook, in bounded slots (the door's, the host's, the caller's), on the
  allow-list, pinned to the address it checked, never redirected, retried with backoff,
  every try a ``push_delivery`` record.

A door sends push notifications only when its manifest allows webhooks somewhere
(``network.push.allow``, docs/push.md); a gateway member's tasks are its upstream's, and
it sends none.
"""
