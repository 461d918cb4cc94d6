"""A TCP port forwarder on loopback, as ``kubectl port-forward`` or an SSH tunnel puts one before a server.

``with forwarded(port) as url:`` listens on a free loopback port (in this test process) and relays every
connection to ``127.0.0.1:port``; the listener on ``url``'s port is then this process, not the server, which
is how an operator reaching a pod or another host sees it. Cost: two threads per connection while it lasts.
"""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@contextmanager
def forwarded(port: int):
    """``http://127.0.0.1:<free port>``, relayed to ``127.0.0.1:port`` while the block runs."""
    listener = socket.create_server(("127.0.0.1", 0))
    open_sockets: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed: the block ended
                return
            upstream = socket.create_connection(("127.0.0.1", port))
            open_sockets.extend((client, upstream))
            threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for s in open_sockets:
            s.close()
