"""Admission: reading ``murmur.yaml`` and ``roster.yaml`` and admitting them (docs/admission.md).

``yaml_files`` (the YAML reader and its faults), ``manifest`` (``murmur.yaml``), ``roster``
(``roster.yaml`` and its admission), ``store`` (the artifact stores and ``murmur.lock``),
``sources`` (capsule sources in a project, for ``--rebuild``) and ``agent_check`` (what
a ``python`` agent needs, checked without running it).
"""
