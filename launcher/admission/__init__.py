"""Admission: reading ``murmur.yaml`` and ``roster.yaml`` and admitting them (docs/admission.md).

``yaml_files`` (the YAML reader and its faults); the manifest, ``murmur.yaml``:
``manifest`` (its models, read), ``manifest_fields`` (the field rules every mapping
shares), ``a2a_agent`` (a gateway member's ``agent.a2a``), ``schema_faults`` (pydantic's
faults in words); the roster: ``roster_structure`` (checks 1-5) and ``roster`` (checks
6-9, the warnings, ``admit``); the artifacts: ``artifacts`` (the ``.mur.zip`` file),
``store`` (the stores) and ``lock`` (``murmur.lock``); ``sources`` (capsule sources in a
project, for ``--rebuild``) and ``agent_check`` (what a ``python`` agent needs, checked
without running it).
"""
