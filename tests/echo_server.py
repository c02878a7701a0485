"""A loopback echo server for the relay's tests (tests/test_relay.py, tests/test_partition.py)."""

from __future__ import annotations

import socket
import threading


def echo_server() -> tuple[str, int]:
    """A loopback server that sends back every byte it reads (TCP_NODELAY), for the life of the test process."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    return server.getsockname()
