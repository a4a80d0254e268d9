"""The agent's protocol over TCP, for a lab split over machines (`deploy --hosts`): the CLI
on one machine reaches every machine's agent over the underlay or management network.

A Unix socket is guarded by the kernel (file mode, SO_PEERCRED); a TCP port is not, so
every request line carries the lab's token (`{"token": ..., "op": ...}`), compared in
constant time. A wrong or missing token is answered with one refusal and the connection
closed, and nothing is dispatched. The agent gets its token in its environment
(RAILAB_AGENT_TOKEN), never on its command line, which every user can read.
"""
from __future__ import annotations

import hmac
import json
import logging
import socketserver
import threading

from dataplane.agent import protocol as proto
from dataplane.runtime.splitstate import TOKEN_ENV
REFUSED = "PermissionError: bad token"
log = logging.getLogger("railab.agent")


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        for raw in self.rfile:
            try:
                message = json.loads(raw)
                token = message.pop("token", "") if isinstance(message, dict) else ""
            except ValueError:
                message, token = None, ""
            if not hmac.compare_digest(str(token).encode(), self.server.token.encode()):
                log.warning("refused a request from %s: bad token", self.client_address[0])
                self.wfile.write((json.dumps({"ok": False, "error": REFUSED}) + "\n").encode())
                return
            try:
                reply = {"ok": True, "result": self.server.control.dispatch(proto.decode(message))}
            except Exception as err:  # the reply carries the error to the CLI
                reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
            self.wfile.write((json.dumps(reply) + "\n").encode())


class TokenServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], token: str, control):
        if len(token) < 16:
            raise ValueError(f"{TOKEN_ENV}: a token of 16 characters or more is needed")
        self.token, self.control = token, control
        super().__init__(address, _Handler)


def listen(spec_address: str, token: str, control) -> tuple[str, int]:
    """Serve `control`'s dispatch on ADDRESS:PORT (port 0: any free one) in a thread;
    returns the address and port bound."""
    host, _, port = spec_address.rpartition(":")
    server = TokenServer((host, int(port)), token, control)
    threading.Thread(target=server.serve_forever, name="tcp-control", daemon=True).start()
    return server.server_address[:2]
