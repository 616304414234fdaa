"""The ``mur`` subcommands. Each module here has ``register(subparsers)``, which adds its
parsers with ``set_defaults(handler=...)``; a handler takes the parsed namespace and
returns the exit status. Handlers import their heavy modules lazily so that ``mur``
starts fast (a formation starts one ``mur`` per member)."""
