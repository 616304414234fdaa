"""Each package has one error tree: every exception a module of gateway/ defines derives
from GatewayError, every one of launcher/ from LauncherError, and each docstring tree
names every public one."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import gateway
import launcher
from gateway import errors as gateway_errors
from gateway.errors import GatewayError
from launcher import errors as launcher_errors
from launcher.errors import LauncherError


def _exceptions(package: object) -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):  # type: ignore[attr-defined]
        module = importlib.import_module(info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == module.__name__:
                found.append(value)
    return found


@pytest.mark.parametrize(("package", "root", "tree"), [
    (gateway, GatewayError, gateway_errors.__doc__),
    (launcher, LauncherError, launcher_errors.__doc__),
])
def test_every_exception_of_a_package_is_under_its_root_and_drawn(
        package: object, root: type[BaseException], tree: str) -> None:
    exceptions = _exceptions(package)
    assert len(exceptions) > 5
    outside = [cls.__qualname__ for cls in exceptions if not issubclass(cls, root)]
    assert outside == []
    undrawn = [cls.__name__ for cls in exceptions
               if not cls.__name__.startswith("_") and cls.__name__ not in tree]
    assert undrawn == []


def test_no_exception_name_means_two_things() -> None:
    names = [cls.__name__ for cls in _exceptions(gateway) + _exceptions(launcher)
             if not cls.__name__.startswith("_")]
    assert sorted(name for name in set(names) if names.count(name) > 1) == []
