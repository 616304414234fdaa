"""One member's door: ``build_door`` and ``Door`` (``app``), the task store and the
lifecycle gate (``tasks``), the bindings (``jsonrpc_binding``, ``rest_binding``), the
agent card (``card``) and the bounds on its streams (``streams``).
"""
