"""An OpenAI-compatible chat-completions server on loopback, scripted by the test.

``FakeOpenAI(script)`` serves ``POST /v1/chat/completions`` on ``127.0.0.1:<free port>``
in a thread. ``script(body, request)`` returns what to answer: :func:`text`,
:func:`tools` (tool calls), or :func:`error` (a status, a message, ``Retry-After``).
With ``stream: true`` in the request (the driver always asks) and ``streaming`` set the
answer is Server-Sent Events in the chunk format, the usage in the last chunk; otherwise
one JSON body. Every request is kept (``requests``: headers and body) so a test can look
at what a member sent, the key and the prompt included.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAI", "Reply", "SeenRequest", "error", "text", "tools"]


@dataclass
class Reply:
    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status: int = 200
    message: str = ""
    retry_after: float | None = None
    usage: tuple[int, int] = (10, 5)


def text(value: str, usage: tuple[int, int] = (10, 5)) -> Reply:
    return Reply(text=value, usage=usage)


def tools(*calls: tuple[str, dict[str, Any]], usage: tuple[int, int] = (10, 5)) -> Reply:
    return Reply(tool_calls=list(calls), usage=usage)


def error(status: int, message: str = "scripted error", retry_after: float | None = None
          ) -> Reply:
    return Reply(status=status, message=message, retry_after=retry_after)


@dataclass
class SeenRequest:
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes

    @property
    def system(self) -> str:
        first = self.body.get("messages", [{}])[0]
        return str(first.get("content", "")) if first.get("role") == "system" else ""

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))


Script = Callable[[dict[str, Any], SeenRequest], Reply]


class FakeOpenAI:
    def __init__(self, script: Script, *, streaming: bool = True) -> None:
        self.script = script
        self.streaming = streaming
        self.requests: list[SeenRequest] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the http.server hook's name
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                seen = SeenRequest(dict(self.headers.items()), json.loads(raw or b"{}"), raw)
                with fake._lock:
                    fake.requests.append(seen)
                if not self.path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": "no such path"}})
                    return
                reply = fake.script(seen.body, seen)
                if reply.status != 200:
                    extra = {} if reply.retry_after is None else {
                        "Retry-After": f"{reply.retry_after:g}"}
                    self._send(reply.status, {"error": {"message": reply.message}}, extra)
                elif fake.streaming and seen.body.get("stream"):
                    self._stream(reply, seen.model)
                else:
                    self._send(200, _whole(reply, seen.model))

            def _send(self, status: int, body: dict[str, Any],
                      extra: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, reply: Reply, model: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in _chunks(reply, model):
                    line = f"data: {json.dumps(chunk)}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                done = b"data: [DONE]\n\n"
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _usage(reply: Reply) -> dict[str, int]:
    prompt, completion = reply.usage
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _tool_calls(reply: Reply) -> list[dict[str, Any]]:
    return [{"id": f"call_{index}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(arguments)}}
            for index, (name, arguments) in enumerate(reply.tool_calls)]


def _whole(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = _tool_calls(reply)
    return {"id": "chatcmpl-fake", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
            "usage": _usage(reply)}


def _chunks(reply: Reply, model: str) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    words = reply.text.split(" ")
    for index, word in enumerate(words if reply.text else []):
        piece = word if index == 0 else " " + word
        chunks.append({**base, "choices": [{"index": 0, "delta": {"content": piece}}]})
    for index, call in enumerate(_tool_calls(reply)):
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": index, "id": call["id"], "type": "function",
            "function": {"name": call["function"]["name"], "arguments": arguments[:half]}}]}}]})
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": index, "function": {"arguments": arguments[half:]}}]}}]})
    chunks.append({**base, "choices": [{"index": 0, "delta": {},
                                        "finish_reason": "tool_calls" if reply.tool_calls
                                        else "stop"}]})
    chunks.append({**base, "choices": [], "usage": _usage(reply)})
    return chunks
