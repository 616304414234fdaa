"""A model member's MCP servers over stdio (``agent.model.tools[].mcp``), with the ``mcp``
package's own client.

In order:

1. :meth:`McpTools.start`, on the first task: one owner task starts every server (in the
   capsule's directory, in a sandbox of its own nested in the agent process's, which
   keeps it from the agent's ``/proc`` and signals: launcher/sandbox/tool_sandbox.py,
   with the agent's environment, which never holds the endpoint's key), initializes a session with
   each and lists its tools. A server that does not start or list within
   :data:`START_SECONDS` fails the task with ``E-RUN-064`` naming it; the next task
   tries again. A tool name already taken (by the runtime, a command tool or an earlier
   server) is not offered twice: the first keeps it;
2. :meth:`McpTools.run` calls a tool by name; its text content is the result, and an
   ``isError`` result or a broken server is a result the model reads;
3. :meth:`McpTools.aclose` (the agent process ending) closes the sessions, which ends
   the servers; the owner task that opened them closes them, as ``anyio`` requires.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Mapping, Sequence, Set
from typing import Any

from launcher.member.model.endpoint import ModelError
from launcher.member.model.tools import ToolOutcome, tool_spec
from launcher.sandbox.tool_sandbox import ToolSandbox

__all__ = ["START_SECONDS", "McpTools"]

#: How long a server may take to start and list its tools.
START_SECONDS = 30.0
#: How long one tool call may take.
CALL_SECONDS = 300.0


class McpTools:
    """Every MCP server of one model member, started once per agent process."""

    def __init__(self, servers: Sequence[Sequence[str]], *, cwd: str, member: str,
                 environ: Mapping[str, str], taken: Set[str],
                 sandbox: ToolSandbox | None = None) -> None:
        self._servers = [tuple(argv) for argv in servers]
        #: Each server's own sandbox, nested in the agent's (None: not confined).
        self._sandbox = sandbox
        self._cwd = cwd
        self._member = member
        self._environ = dict(environ)
        self._taken = set(taken)
        self._sessions: dict[str, Any] = {}     # tool name -> its server's session
        self._specs: list[dict[str, Any]] = []
        self._started = False
        self._lock = asyncio.Lock()
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        #: The server being started (named by a failure).
        self._pending: tuple[str, ...] = ()

    # --- 1. start --------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every server once; raises :class:`ModelError` (``E-RUN-064``)."""
        if self._started or not self._servers:
            return
        async with self._lock:
            if self._started:
                return
            ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._stop = asyncio.Event()
            self._owner = asyncio.create_task(self._own(ready), name="murmur-mcp")
            try:
                await asyncio.wait_for(asyncio.shield(ready), START_SECONDS)
            except TimeoutError:
                await self._abandon()
                raise ModelError("E-RUN-064", "agent.model.tools", member=self._member,
                                 tool=" ".join(self._pending or self._servers[0]),
                                 reason=f"it did not list its tools in {START_SECONDS:g} s"
                                 ) from None
            except ModelError:
                await self._abandon()
                raise
            self._started = True

    async def _own(self, ready: asyncio.Future[None]) -> None:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        try:
            async with contextlib.AsyncExitStack() as stack:
                for argv in self._servers:
                    self._pending = argv
                    try:
                        run = (list(argv) if self._sandbox is None
                               else self._sandbox.argv(argv))
                        params = StdioServerParameters(command=run[0], args=run[1:],
                                                       env=self._environ, cwd=self._cwd)
                        read, write = await stack.enter_async_context(
                            stdio_client(params, errlog=sys.stderr))
                        session = await stack.enter_async_context(ClientSession(read, write))
                        await session.initialize()
                        listed = await session.list_tools()
                    except Exception as exc:  # noqa: BLE001 - any failure names the server
                        if not ready.done():
                            ready.set_exception(ModelError(
                                "E-RUN-064", "agent.model.tools", member=self._member,
                                tool=" ".join(argv), reason=_reason(exc)))
                        return
                    self._offer(session, listed.tools)
                self._pending = ()
                if not ready.done():
                    ready.set_result(None)
                await self._stop.wait()
        except Exception as exc:  # noqa: BLE001 - a server that broke while closing
            if not ready.done():
                ready.set_exception(ModelError(
                    "E-RUN-064", "agent.model.tools", member=self._member,
                    tool=" ".join(self._pending), reason=_reason(exc)))

    def _offer(self, session: Any, tools: Sequence[Any]) -> None:
        for tool in tools:
            if tool.name in self._taken:
                continue
            self._taken.add(tool.name)
            self._sessions[tool.name] = session
            schema = dict(tool.inputSchema or {"type": "object", "properties": {}})
            spec = tool_spec(tool.name, tool.description or tool.name, {}, ())
            spec["function"]["parameters"] = schema
            self._specs.append(spec)

    async def _abandon(self) -> None:
        self._stop.set()
        owner, self._owner = self._owner, None
        if owner is not None:
            owner.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(owner, 5.0)
        self._sessions.clear()
        self._specs.clear()

    # --- what the toolbox asks -----------------------------------------------------------

    def specs(self) -> list[dict[str, Any]]:
        return list(self._specs)

    def names(self) -> set[str]:
        return set(self._sessions)

    # --- 2. run ------------------------------------------------------------------------------

    async def run(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        from datetime import timedelta

        started = time.monotonic()
        try:
            result = await self._sessions[name].call_tool(
                name, arguments, read_timeout_seconds=timedelta(seconds=CALL_SECONDS))
        except Exception as exc:  # noqa: BLE001 - the model reads what went wrong
            return ToolOutcome(f"the tool {name} failed: {_reason(exc)}", "failed",
                               time.monotonic() - started)
        text = "\n".join(str(getattr(part, "text", "")) for part in result.content
                         if getattr(part, "type", "") == "text")
        if not text and getattr(result, "structuredContent", None) is not None:
            import json

            text = json.dumps(result.structuredContent, ensure_ascii=False)
        return ToolOutcome(text, "failed" if result.isError else "ok",
                           time.monotonic() - started)

    # --- 3. close ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        await self._abandon()
        self._started = False


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _reason(exc.exceptions[0])
    if isinstance(exc, FileNotFoundError):
        return f"{exc.filename or 'its program'} was not found"
    text = " ".join(str(exc).split())
    return (text or type(exc).__name__)[:300]
