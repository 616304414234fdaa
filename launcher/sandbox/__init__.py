"""The sandbox: what agent code runs inside, and that nothing it starts outlives it
(docs/isolation.md).

``landlock`` (files, TCP ports, signals, abstract sockets), ``seccomp`` (the socket
filter), ``privileges`` (every capability dropped), ``isolation`` (``--isolation`` and
what is said of the host), ``hostcheck`` (``W-SEC-013``), ``descendants`` (the process
tree a runtime owns) and ``agent_cgroup`` (a cgroup per member's agent side).
"""
