"""One member's door: ``build_door`` and ``Door`` (``app``); the task store and the
lifecycle gate (``tasks``), one task as kept (``task_record``), the ended tasks kept
(``retention``) and listed (``listing``); the A2A methods once, binding-neutral
(``methods``; a local door's in ``local_methods``) and the thin bindings over them
(``jsonrpc_binding``, ``rest_binding``); the agent card (``card``), the media types its
parts may have (``media_types``) and the bounds on its streams (``streams``).
"""
