"""Who may come in: ``DoorAuth`` and its ordered checks (``door_auth``), with what it
reads of a request (``request_reading``), the ``Host`` check (``hosts``) and its one
table of refusals (``refusals``); the credentials a door accepts (``credentials``), the
``mft1`` formation token (``tokens``) and CORS in front of it all (``cors``).
"""
