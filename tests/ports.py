"""Loopback ports for tests."""

import socket


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listened on when asked: closed, until a test serves on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
