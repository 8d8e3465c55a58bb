"""Reading one HTTP/1.1 answer off a raw socket (requests no client library would send)."""

from __future__ import annotations

import socket


def read_response(sock: socket.socket) -> bytes:
    """Head and body of one answer, the body as long as its Content-Length (or what came before EOF)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                   if line.startswith(b"content-length:")), None)
    while length is not None and len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body
