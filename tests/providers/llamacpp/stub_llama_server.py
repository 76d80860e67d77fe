"""A stand-in for `llama-server` to test `readme_check.sh` with: it takes the options the
script gives it (`-m`, `--host`, `--port`, ...), answers `GET /health` as llama-server does
once its model is loaded, and both wire formats as the fake server does, without a key."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.providers.fake_llm_server import FakeServer, FakeState, Handler


class LlamaHandler(Handler):
    """The fake server's handler, plus llama-server's health check."""

    def do_GET(self) -> None:
        if self.path != "/health":
            self.send_error(404)
            return
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class LlamaServer(FakeServer):
    """The fake server on the address asked for."""

    def __init__(self, state: FakeState, host: str, port: int) -> None:
        ThreadingHTTPServer.__init__(self, (host, port), LlamaHandler)
        self.state = state


def main() -> None:
    """Serve on the given port until SIGTERM."""
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", "--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("-np", "--parallel", type=int, default=1)
    parser.add_argument("-c", "--ctx-size", type=int, default=4096)
    args = parser.parse_args()
    if not Path(args.model).is_file():
        sys.exit(f"error: failed to load model '{args.model}'")
    state = FakeState(api_key="", models={"local-model"}, reply=["A short ", "answer."])
    server = LlamaServer(state, args.host, args.port)

    def stop(signum: int, frame: FrameType | None) -> None:
        state.stopping.set()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    server.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
