"""What a member is started with (docs/runtime-files.md, docs/launcher.md).

``channel`` (the formation channel: credentials, then doors), ``process`` (child
processes, pipes, lines, liveness), ``env_names`` (every ``MURMUR_*`` variable),
``run_flags`` and ``listen_flags`` (the flags ``mur run`` passes on).
"""
