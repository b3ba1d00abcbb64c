"""The reader of opencode's event stream (`core/adapters/eventstream.py`) against a loopback
server that behaves as opencode does while it starts."""

from __future__ import annotations

import socket
import threading
import time

from laneboard.core.adapters.eventstream import ANSWER_WITHIN, connect


def test_a_connection_accepted_and_never_answered_is_given_up_and_tried_again() -> None:
    """Issue 21, item 4: opencode accepts a connection to /event while it starts and never
    answers it; the reader waited on it forever and never delivered an event (3 of 3)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    held: list[socket.socket] = []

    def serve() -> None:
        first, _ = listener.accept()
        held.append(first)  # accepted, never answered
        second, _ = listener.accept()
        second.recv(4096)
        second.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
            b'data: {"type":"server.connected"}\n\n'
        )
        held.append(second)

    threading.Thread(target=serve, daemon=True).start()
    began = time.monotonic()
    stream = connect(f"http://127.0.0.1:{port}/event", connect_for=10 * ANSWER_WITHIN)
    assert stream is not None
    assert next(stream).startswith(b"data: ")
    assert time.monotonic() - began < 3 * ANSWER_WITHIN
    for sock in held:
        sock.close()
    listener.close()


def test_no_server_at_all_gives_up_after_its_time() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert connect(f"http://127.0.0.1:{port}/event", connect_for=0.5) is None
