"""A gateway member's relay to its upstream A2A server (docs/gateway.md): the tasks
side (``tasks``), the upstream client (``client``, ``rest_framing``) and one upstream
subscription per task (``fanout``).
"""
