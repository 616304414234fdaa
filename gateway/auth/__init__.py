"""Who may come in: ``DoorAuth`` and its ordered checks (``door_auth``), the
credentials a door accepts (``credentials``), the ``mft1`` formation token (``tokens``)
and CORS in front of it all (``cors``).
"""
