"""launcher.member.confinement and launcher.member.proxy_slot: what agent code may touch,
and the forward proxy reserved before it exists."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import httpx

from gateway.proxy.env import PROXY_VARIABLES
from gateway.proxy.formation import FormationTransport
from gateway.proxy.forward import ForwardProxy
from launcher.member.confinement import agent_plan, python_paths
from launcher.member.proxy_slot import ProxySlot


def test_the_plan_grants_the_system_python_capsule_and_own_folders(tmp_path: Path) -> None:
    home = tmp_path / "murmur-home"
    plan = agent_plan(home=home, capsule_dir=home / "records" / "s" / "capsule",
                      session_dirs=[home / "records" / "s" / "home"],
                      workdir=tmp_path / "work", proxy_port=4242, bind_ports=(5151,))
    assert {"/usr", "/etc"} <= set(plan.read) and "/dev/null" in plan.write
    assert os.path.realpath(sys.prefix) in plan.read
    assert str(home / "records" / "s" / "capsule") in plan.read
    assert str(home / "records" / "s" / "home") in plan.write
    assert str(tmp_path / "work") in plan.write
    assert (plan.connect, plan.bind, plan.withheld) == ((4242,), (5151,), ())
    # MURMUR_HOME itself, and anything above it, is never granted
    assert not any(str(home).startswith(path.rstrip("/") + "/") or str(home) == path
                   for path in plan.read + plan.write if path != "/dev/null")


def test_a_work_folder_that_holds_murmur_home_is_withheld(tmp_path: Path) -> None:
    home = tmp_path / "project" / ".murmur-home"
    plan = agent_plan(home=home, capsule_dir=home / "c", session_dirs=[home / "h"],
                      workdir=tmp_path / "project", proxy_port=1)
    assert str(tmp_path / "project") not in plan.write
    assert plan.withheld == (str(tmp_path / "project"),)
    assert str(home / "h") in plan.write  # the session's own folders still are


def test_python_paths_are_real_folders() -> None:
    paths = python_paths()
    assert all(os.path.isdir(path) or os.path.isfile(path) for path in paths)
    assert os.path.dirname(os.path.realpath(sys.executable)) in paths


async def test_the_proxy_is_built_by_its_first_connection_which_it_then_serves() -> None:
    slot = ProxySlot()
    built: list[str] = []
    transport = FormationTransport(httpx.AsyncHTTPTransport(), tokens={}, doors=None,
                                   allow=["127.0.0.1"])

    def build(secret: str) -> ForwardProxy:
        built.append(secret)
        return ForwardProxy(transport, trust=lambda: "untrusted", secret=secret)

    try:
        slot.serve_when_reached(build)
        env = slot.environment({"NO_PROXY": "*"})
        assert set(env) == set(PROXY_VARIABLES)
        await asyncio.sleep(0.05)
        assert built == []          # nobody connected: no proxy, no httpx pool
        async with httpx.AsyncClient(proxy=slot.url, trust_env=False) as client:
            answer = await client.get("http://outside.example/")
        assert answer.status_code == 403
        assert answer.headers["proxy-status"] == "murmur; error=egress_refused"
        assert len(built) == 1 and built[0] in slot.url
        assert repr(slot) == f"ProxySlot(port={slot.port})"
    finally:
        await slot.close()
