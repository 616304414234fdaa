"""launcher.sandbox.isolation: the mode, W-SEC-014 and E-RUN-055, and what mur doctor reports."""

from __future__ import annotations

import pytest

from launcher.diagnostics import DiagnosticError
from launcher.sandbox.isolation import (
    host_report,
    isolation_diagnostics,
    isolation_mode,
    report_line,
)
from launcher.sandbox.landlock import HostSupport
from launcher.sandbox.seccomp import SeccompSupport

FULL = HostSupport(7)
NO_TCP = HostSupport(3)
NONE = HostSupport(0, "the kernel has no Landlock system calls (older than 5.13)")
FILTER = SeccompSupport(True)
NO_FILTER = SeccompSupport(False, "the kernel is built without seccomp")


def test_the_flag_wins_then_the_variable_then_auto() -> None:
    assert isolation_mode(None, {}) == "auto"
    assert isolation_mode(None, {"MURMUR_ISOLATION": "off"}) == "off"
    assert isolation_mode("required", {"MURMUR_ISOLATION": "off"}) == "required"
    assert isolation_mode(None, {"MURMUR_ISOLATION": ""}) == "auto"


@pytest.mark.parametrize(("flag", "environ", "source"), [
    ("maybe", {}, "--isolation"), (None, {"MURMUR_ISOLATION": "ON"}, "MURMUR_ISOLATION")])
def test_a_value_that_is_not_a_mode_names_where_it_came_from(
        flag: str | None, environ: dict[str, str], source: str) -> None:
    with pytest.raises(ValueError, match=f"^{source} must be one of auto, required, off"):
        isolation_mode(flag, environ)


def test_a_host_that_confines_fully_says_nothing_in_any_mode() -> None:
    for mode in ("auto", "required", "off"):
        assert isolation_diagnostics(mode, {}, FULL, FILTER) == []


def test_auto_on_a_host_without_tcp_rules_warns_once_naming_what_is_missing() -> None:
    (warning,) = isolation_diagnostics("auto", {}, NO_TCP)
    assert warning.code == "W-SEC-014"
    assert "TCP rules (Landlock ABI 3; they need ABI 4)" in warning.message
    assert "signal and abstract-socket scoping" in warning.message
    # the launcher printed it: its members do not
    assert isolation_diagnostics("auto", {"MURMUR_HOST_WARNINGS_REPORTED": "1"}, NO_TCP) == []


def test_required_without_landlock_is_e_run_055_naming_the_reason() -> None:
    with pytest.raises(DiagnosticError) as refused:
        isolation_diagnostics("required", {}, NONE)
    assert refused.value.code == "E-RUN-055"
    assert refused.value.path == "--isolation"
    assert "older than 5.13" in refused.value.diagnostic.message
    assert isolation_diagnostics("off", {}, NONE) == []


def test_doctor_reports_the_host_and_the_mode() -> None:
    report = host_report({"MURMUR_ISOLATION": "off"}, NO_TCP, FILTER)
    assert report["mode"] == "off" and report["landlock_abi"] == 3
    assert (report["files"], report["tcp"], report["scoped"]) == (True, False, False)
    assert report_line(report) == ("isolation: Landlock ABI 3: files; seccomp socket filter; "
                                   "MURMUR_ISOLATION=off: agent code runs unconfined")
    assert report_line(host_report({}, FULL, FILTER)).endswith("agent code runs fully confined")
    assert "partly confined (missing: TCP rules" in report_line(host_report({}, NO_TCP))


def test_a_host_without_the_socket_filter_is_warned_in_auto_and_refused_in_required() -> None:
    (warning,) = isolation_diagnostics("auto", {}, FULL, NO_FILTER)
    assert warning.code == "W-SEC-014"
    assert "the seccomp socket filter (the kernel is built without seccomp)" in warning.message
    assert "no seccomp socket filter" in warning.message  # what it offers
    with pytest.raises(DiagnosticError) as refused:
        isolation_diagnostics("required", {}, FULL, NO_FILTER)
    assert refused.value.code == "E-RUN-055"
    assert "seccomp socket filter" in refused.value.diagnostic.message
    assert isolation_diagnostics("off", {}, FULL, NO_FILTER) == []


def test_doctor_reports_the_socket_filter() -> None:
    report = host_report({}, FULL, NO_FILTER)
    assert report["seccomp"] is False
    assert report["missing"] == ["the seccomp socket filter (the kernel is built without "
                                 "seccomp)"]
    assert host_report({}, FULL, FILTER)["seccomp"] is True
