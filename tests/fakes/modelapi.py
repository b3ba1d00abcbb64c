"""A small fake model API on loopback, for the real agent programs (tests/e2e/test_real_<agent>.py).

It speaks just enough of each wire format the agents use for a turn, streamed or not:
Anthropic messages (`POST /v1/messages`: Claude Code), OpenAI responses (`POST /v1/responses`:
Codex), OpenAI chat completions (`POST /v1/chat/completions`: aider, opencode) and Gemini
(`POST /v1beta/models/<model>:generateContent` / `:streamGenerateContent`: Gemini CLI).

What it answers depends on the newest user text of the request, so a test steers a turn by its
prompt:
- `lb-ask`: a tool call that needs the operator's permission (a shell command that writes a
  file, through whichever shell tool the request offers; aider gets a shell block in its text),
  then, once the tool's result comes back, a text turn.
- `lb-hold`: the answer waits until the test calls `release()` (a long turn, as long as the
  test needs: the agent shows busy meanwhile).
- anything else: a short text turn (`ok: <the prompt>`).
Requests that offer no tools (titles, summaries, next-speaker checks) always get a short text,
JSON when they ask for JSON. Every request is kept in `requests` for the test to read.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ASK = "lb-ask"
HOLD = "lb-hold"
COMMAND = "touch asked.txt"
"""What the tool call that needs permission runs (in the agent's cwd)."""


def _texts(value: Any) -> Iterator[str]:
    """Every string inside a JSON value (message contents of any of the formats)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in ("type", "role", "id", "call_id", "tool_use_id", "name"):
                yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


class Turn:
    """What one request asks for, read from its body in any of the formats."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.tools = self._tool_names()
        self.after_tool = self._last_is_tool_result()
        self.prompt = self._last_user_text()

    def _tool_names(self) -> list[str]:
        names: list[str] = []
        for tool in self.body.get("tools") or []:
            if not isinstance(tool, dict):
                continue
            if "name" in tool:
                names.append(str(tool["name"]))
            elif isinstance(tool.get("function"), dict):
                names.append(str(tool["function"].get("name")))
            for declared in (
                tool.get("functionDeclarations") or tool.get("function_declarations") or []
            ):
                names.append(str(declared.get("name")))
        return names

    def _messages(self) -> list[Any]:
        for key in ("messages", "input", "contents"):
            found = self.body.get(key)
            if isinstance(found, list):
                return found
            if isinstance(found, str):
                return [{"role": "user", "content": found}]
        return []

    def _last_is_tool_result(self) -> bool:
        messages = self._messages()
        if not messages:
            return False
        last = messages[-1]
        if not isinstance(last, dict):
            return False
        if last.get("role") == "tool" or last.get("type") == "function_call_output":
            return True
        text = json.dumps(last)
        return '"tool_result"' in text or '"functionResponse"' in text

    def _last_user_text(self) -> str:
        for message in reversed(self._messages()):
            if not isinstance(message, dict) or message.get("role") not in ("user", None):
                continue
            if message.get("type") == "function_call_output":
                continue
            text = " ".join(_texts(message.get("content", message.get("parts", ""))))
            if text.strip():
                return text
        return ""

    def wants(self, marker: str) -> bool:
        return marker in self.prompt

    def wants_json(self) -> bool:
        config = self.body.get("generationConfig") or self.body.get("generation_config") or {}
        format_ = self.body.get("response_format") or {}
        return config.get("responseMimeType") == "application/json" or (
            isinstance(format_, dict) and format_.get("type") in ("json_object", "json_schema")
        )

    def answer(self) -> str:
        if self.wants_json():
            return json.dumps({"next_speaker": "user", "reasoning": "the turn is done"})
        if self.after_tool:
            return "done: the file is there"
        shown = re.sub(r"\s+", " ", self.prompt)[-60:]
        if self.wants(ASK) and not self.tools:  # aider: a shell block it offers to run
            return f"Run this:\n\n```bash\n{COMMAND}\n```\n"
        return f"ok: {shown}"

    def tool_call(self) -> tuple[str, dict[str, Any]] | None:
        """The shell tool call an `lb-ask` turn makes, in the request's own tool's terms."""
        if not self.wants(ASK) or self.after_tool:
            return None
        calls: dict[str, dict[str, Any]] = {
            "Bash": {"command": COMMAND, "description": "Make a file"},
            "bash": {"command": COMMAND, "description": "Make a file"},
            "run_shell_command": {"command": COMMAND, "description": "Make a file"},
            "shell": {"command": ["bash", "-lc", COMMAND]},
            "shell_command": {"command": COMMAND},
            "exec_command": {
                "cmd": COMMAND,
                "sandbox_permissions": "require_escalated",
                "justification": "make a file",
            },
        }
        for name in self.tools:
            if name in calls:
                return name, calls[name]
        return None


class ModelAPI:
    """The server: `start()` on a free loopback port, `url`, `requests`, `release()`, `stop()`."""

    def __init__(self, port: int = 0) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.verbose = False
        self._released = 0
        self._holding = threading.Condition()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ModelAPI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def release(self) -> None:
        """End the `lb-hold` turns waiting now."""
        with self._holding:
            self._released += 1
            self._holding.notify_all()

    def _hold(self) -> None:
        with self._holding:
            mark = self._released
            self._holding.wait_for(lambda: self._released > mark, timeout=60)

    def prompts(self, *, main: bool = False) -> list[str]:
        """The newest user text of each request; with `main`, only of requests that offer
        tools (the agent's own turns, not its titles and summaries)."""
        with self._lock:
            turns = [Turn(body) for _, body in self.requests]
        return [turn.prompt for turn in turns if turn.tools or not main]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/lb/release":  # by hand: ends the held turns
                    api.release()
                    self._json({})
                elif self.path.rstrip("/").endswith("/models"):
                    self._json({"object": "list", "data": [{"id": "fake", "object": "model"}]})
                else:
                    self._json({}, status=404)

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                if not isinstance(body, dict):
                    body = {}
                with api._lock:
                    api.requests.append((self.path, body))
                turn = Turn(body)
                if api.verbose:
                    print(self.path, turn.tools, repr(turn.prompt[-80:]), turn.after_tool,
                          file=sys.stderr, flush=True)  # fmt: skip
                path = self.path.split("?")[0]
                if turn.wants(HOLD) and not turn.wants_json() and turn.tools:
                    api._hold()
                if path.endswith("/count_tokens") or path.endswith(":countTokens"):
                    self._json({"input_tokens": 10, "totalTokens": 10})
                elif path.endswith("/messages"):
                    self._anthropic(turn)
                elif path.endswith("/responses"):
                    self._responses(turn)
                elif path.endswith("/chat/completions"):
                    self._chat(turn)
                elif ":streamGenerateContent" in path or ":generateContent" in path:
                    self._gemini(turn, stream=":streamGenerateContent" in path)
                else:
                    self._json({"error": {"message": f"no such route {path}"}}, status=404)

            # --- plumbing -------------------------------------------------------------------

            def _json(self, data: object, status: int = 200) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _events(self, events: list[tuple[str | None, object]]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for name, data in events:
                    chunk = "" if name is None else f"event: {name}\n"
                    payload = data if isinstance(data, str) else json.dumps(data)
                    chunk += f"data: {payload}\n\n"
                    self.wfile.write(chunk.encode())
                    self.wfile.flush()
                self.close_connection = True

            # --- Anthropic messages -----------------------------------------------------------

            def _anthropic(self, turn: Turn) -> None:
                model = turn.body.get("model", "fake")
                call = turn.tool_call()
                if call is not None:
                    name, arguments = call
                    block: dict[str, Any] = {
                        "type": "tool_use", "id": f"toolu_{time.time_ns()}", "name": name,
                        "input": arguments,
                    }  # fmt: skip
                    stop = "tool_use"
                else:
                    block = {"type": "text", "text": turn.answer()}
                    stop = "end_turn"
                usage = {"input_tokens": 10, "output_tokens": 5}
                message = {
                    "id": f"msg_{time.time_ns()}", "type": "message", "role": "assistant",
                    "model": model, "content": [block], "stop_reason": stop,
                    "stop_sequence": None, "usage": usage,
                }  # fmt: skip
                if not turn.body.get("stream"):
                    self._json(message)
                    return
                start = {**message, "content": [], "stop_reason": None}
                if block["type"] == "text":
                    opened: dict[str, Any] = {"type": "text", "text": ""}
                    delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
                else:
                    opened = {**block, "input": {}}
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                self._events(
                    [
                        ("message_start", {"type": "message_start", "message": start}),
                        ("content_block_start",
                         {"type": "content_block_start", "index": 0, "content_block": opened}),
                        ("content_block_delta",
                         {"type": "content_block_delta", "index": 0, "delta": delta}),
                        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                        ("message_delta",
                         {"type": "message_delta", "delta": {"stop_reason": stop,
                          "stop_sequence": None}, "usage": {"output_tokens": 5}}),
                        ("message_stop", {"type": "message_stop"}),
                    ]
                )  # fmt: skip

            # --- OpenAI responses -------------------------------------------------------------

            def _responses(self, turn: Turn) -> None:
                ident = f"resp_{time.time_ns()}"
                call = turn.tool_call()
                if call is not None:
                    name, arguments = call
                    item: dict[str, Any] = {
                        "type": "function_call", "id": f"fc_{time.time_ns()}", "name": name,
                        "arguments": json.dumps(arguments), "call_id": f"call_{time.time_ns()}",
                        "status": "completed",
                    }  # fmt: skip
                else:
                    text = turn.answer()
                    item = {
                        "type": "message", "id": f"msg_{time.time_ns()}", "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}],
                    }  # fmt: skip
                usage = {
                    "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": 15,
                }  # fmt: skip
                response = {"id": ident, "object": "response", "status": "completed",
                            "output": [item], "usage": usage}  # fmt: skip
                if not turn.body.get("stream"):
                    self._json(response)
                    return
                events: list[tuple[str | None, object]] = [
                    ("response.created", {"type": "response.created",
                                          "response": {**response, "status": "in_progress",
                                                       "output": []}}),
                    ("response.output_item.added",
                     {"type": "response.output_item.added", "output_index": 0, "item": item}),
                ]  # fmt: skip
                if item["type"] == "message":
                    events.append(
                        ("response.output_text.delta",
                         {"type": "response.output_text.delta", "item_id": item["id"],
                          "output_index": 0, "content_index": 0,
                          "delta": item["content"][0]["text"]})
                    )  # fmt: skip
                events += [
                    ("response.output_item.done",
                     {"type": "response.output_item.done", "output_index": 0, "item": item}),
                    ("response.completed", {"type": "response.completed", "response": response}),
                ]  # fmt: skip
                self._events(events)

            # --- OpenAI chat completions ------------------------------------------------------

            def _chat(self, turn: Turn) -> None:
                ident = f"chatcmpl-{time.time_ns()}"
                model = turn.body.get("model", "fake")
                call = turn.tool_call()
                usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
                if call is not None:
                    name, arguments = call
                    tool = {
                        "index": 0,
                        "id": f"call_{time.time_ns()}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                    message: dict[str, Any] = {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [tool],
                    }
                    finish = "tool_calls"
                else:
                    message = {"role": "assistant", "content": turn.answer()}
                    finish = "stop"  # fmt: skip
                if not turn.body.get("stream"):
                    plain = dict(message)
                    if "tool_calls" in plain:
                        plain["tool_calls"] = [
                            {k: v for k, v in t.items() if k != "index"}
                            for t in plain["tool_calls"]
                        ]
                    self._json(
                        {"id": ident, "object": "chat.completion", "created": int(time.time()),
                         "model": model, "usage": usage,
                         "choices": [{"index": 0, "message": plain, "finish_reason": finish}]}
                    )  # fmt: skip
                    return

                def chunk(delta: dict[str, Any], reason: str | None, **more: Any) -> object:
                    return {"id": ident, "object": "chat.completion.chunk",
                            "created": int(time.time()), "model": model,
                            "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
                            **more}  # fmt: skip

                self._events(
                    [
                        (None, chunk(message, None)),
                        (None, chunk({}, finish, usage=usage)),
                        (None, "[DONE]"),
                    ]
                )

            # --- Gemini -----------------------------------------------------------------------

            def _gemini(self, turn: Turn, *, stream: bool) -> None:
                call = turn.tool_call()
                if call is not None:
                    name, arguments = call
                    part: dict[str, Any] = {"functionCall": {"name": name, "args": arguments}}
                else:
                    part = {"text": turn.answer()}
                answer = {
                    "candidates": [{"content": {"role": "model", "parts": [part]},
                                    "finishReason": "STOP", "index": 0}],
                    "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                                      "totalTokenCount": 15},
                    "modelVersion": "fake",
                }  # fmt: skip
                if stream:
                    self._events([(None, answer)])
                else:
                    self._json(answer)

        return Handler


if __name__ == "__main__":  # by hand: `python tests/fakes/modelapi.py` serves until Ctrl-C
    served = ModelAPI(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    served.verbose = True
    served.start()
    print(served.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        served.stop()
