"""murmur-door's process side: the ``mur`` command, capsules, rosters, members, formations."""

__version__ = "0.1.0"
