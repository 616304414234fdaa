"""The member template's warm imports (launcher/template.py) where the runtime was
installed without the grpc extra, as `make demo` installs it."""

from __future__ import annotations

import subprocess
import sys

from tests.support.formation import REPO

#: Runs the template's warm-up with every import of grpc refused, as in a runtime
#: install without the extra.
WITHOUT_GRPC = """
import sys

class NoGrpc:
    def find_spec(self, name, path=None, target=None):
        if name == "grpc" or name.startswith("grpc.") or name.startswith("grpc_"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoGrpc())
import launcher.template
launcher.template._warm()
print("warm", "gateway.grpc.server" in sys.modules, "launcher.member.main" in sys.modules)
"""


def test_the_template_warms_without_the_grpc_extra_and_prints_no_traceback() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_GRPC], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["warm", "False", "True"]
    assert "Traceback" not in done.stderr and "ModuleNotFoundError" not in done.stderr
