"""Delegation to child capsules (docs/delegation.md): a member whose
``capabilities.spawn.allow`` names a capsule hands a task to a child session of it.

``lineage`` is the child's side (who delegated to it, how deep it is); ``grant`` reads
``spawn.allow`` and picks the version to run; ``child`` is one child process, from its
start to its answer; ``delegator`` is a session's children and their bounds; and
``task_children`` joins a task's children to its calls, so ``task.answers()`` and the
turn rule see both.
"""
