"""A gateway member's relay to its upstream A2A server (docs/gateway.md): the tasks side
(``tasks``, with what it knows of each task in ``known``), the A2A methods relayed
(``methods``), the upstream client (``client``, ``rest_framing``) and one upstream
subscription per task (``fanout``).
"""
