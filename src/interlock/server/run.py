"""Serving: bind the socket (so port 0 works and the real address is printed), then run uvicorn
with the app in this process."""

from __future__ import annotations

import errno
import socket
import sys
from typing import Any

from interlock.errors import MissingExtra, UsageError
from interlock.server.config import ServerConfig


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(
                f"cannot serve on {host}:{port}: the port is in use (another 'interlock "
                "serve', maybe); choose another with --port, or stop what listens there"
            ) from None
        raise UsageError(
            f"cannot serve on {host}:{port}: {exc.strerror or exc}; check --host and --port"
        ) from None
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket, host: str) -> str:
    """The base URL clients use for the bound socket."""
    port = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    return f"http://{shown}:{port}"


def serve(config: ServerConfig, *, log_level: str = "warning") -> None:
    """Serve until interrupted (SIGINT/SIGTERM stop it gracefully: leases are handed back)."""
    try:
        import uvicorn

        from interlock.server.app import build_app
    except ImportError as exc:
        raise MissingExtra(
            f"the server needs an extra: pip install 'interlock[server]' (in a clone of "
            f"the repository: pip install -e '.[server]'); {exc}"
        ) from None

    sock = bind(config.host, config.port)  # a port in use is said before anything starts
    app = build_app(config)
    print(f"interlock serving on {url_of(sock, config.host)}/ui/", file=sys.stderr, flush=True)
    for line in config_lines(config):
        print(line, file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn_config(app, config, log_level=log_level))
    server.run(sockets=[sock])


def config_lines(config: ServerConfig) -> list[str]:
    """What the server says at start about model configuration: the files each workflow
    folder's runs use (found now, in the order of docs/models.md), and that they are read
    once: a change made while it serves is not seen until a restart."""
    from interlock.providers.config_paths import found_line

    folders = dict.fromkeys(w.absolute().parent for w in config.workflows)
    lines = [f"{folder}: {found_line(folder, config.home)}" for folder in folders]
    lines.append(
        "note: a workflow folder's configuration (interlock.toml) is read once, when the "
        "first run from it is driven here; restart the server to apply a change to it"
    )
    return lines


SHUTDOWN_GRACE_S = 10  # seconds


def uvicorn_config(app: Any, config: ServerConfig, *, log_level: str = "warning") -> Any:
    """How uvicorn serves `app`: HTTP/1.1 with deadlines for each request's headers and body,
    idle keep-alive connections closed after 5 s, request heads of at most 16 KiB, WebSocket
    messages of at most 1 MiB, `SHUTDOWN_GRACE_S` for connections at shutdown, and no
    permessage-deflate: it compresses every frame once per
    client (the stream's frames are shared by all clients), which cost the server more CPU
    than everything else it did for 200 watchers."""
    import uvicorn

    from interlock.server.protocol import bounded

    return uvicorn.Config(
        app,
        log_level=log_level,
        lifespan="on",
        http=bounded(config.header_timeout, config.body_timeout),
        timeout_keep_alive=5,
        h11_max_incomplete_event_size=16 * 1024,
        ws_max_size=1 << 20,
        ws_per_message_deflate=False,
        # On SIGTERM, connections get this long to finish: a stream client that stopped
        # reading would otherwise hold the shutdown, and the hand-back of every lease, forever.
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
