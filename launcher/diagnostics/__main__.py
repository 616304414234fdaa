"""``python -m launcher.diagnostics --write-docs`` (or ``--check``): docs/diagnostics.md."""

from __future__ import annotations

import sys

from launcher.diagnostics.page import main

if __name__ == "__main__":
    sys.exit(main())
