"""The agent's control socket: made 0600 and owned by its user, and a connection from any
other user is refused by its kernel-recorded credentials (SO_PEERCRED), even when the file's
mode would let it in."""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import pytest

from dataplane.agent import protocol as proto
from dataplane.agent import server

NOBODY = 65534


class _Counters:
    """Stands in for the switch programmer: the one request these tests send."""

    def counters(self, switch):
        return {"switch": switch}


@pytest.fixture
def control():
    # pytest's tmp_path sits under 0700 folders; this one lets anyone reach the socket, so
    # that the socket's own mode and the agent's check are what decide
    folder = Path(tempfile.mkdtemp(prefix="railab-access-"))
    folder.chmod(0o755)
    srv = server.ControlServer(str(folder / "agent.sock"), _Counters())
    import threading   # why: only this fixture runs a server thread
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()
    shutil.rmtree(folder)


def _ask(path: str) -> bytes:
    """One counters request; b"" when the agent hangs up instead of answering."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(path)
        try:
            sock.sendall((json.dumps(proto.request("counters", switch="leaf1").to_wire()) + "\n").encode())
            return sock.makefile("rb").readline()
        except ConnectionError:
            return b""


def test_the_socket_is_its_owners_alone(control):
    st = os.stat(control.server_address)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid())
    reply = json.loads(_ask(control.server_address))
    assert reply == {"ok": True, "result": {"switch": "leaf1"}}


def _ask_as(uid: int, path: str) -> tuple[str, bytes]:
    """Connect from a child process running as `uid`: ("refused", b"") when connect
    fails, else ("connected", the reply line or b"" when the agent hung up)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            try:
                reply = _ask(path)
                os.write(write_end, b"connected\n" + reply)
            except PermissionError:
                os.write(write_end, b"refused\n")
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    verdict, _, rest = out.partition(b"\n")
    return verdict.decode(), rest


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")
def test_another_user_is_refused(control, caplog):
    path = control.server_address
    assert _ask_as(NOBODY, path) == ("refused", b"")           # the file's mode
    os.chmod(path, 0o666)                                       # as if someone loosened it
    with caplog.at_level("WARNING", logger="railab.agent"):
        verdict, reply = _ask_as(NOBODY, path)
    assert (verdict, reply) == ("connected", b"")               # accepted, then hung up
    assert any(f"uid {NOBODY}" in r.getMessage() and "refused" in r.getMessage() for r in caplog.records)
    assert json.loads(_ask(path))["ok"]                         # the owner still gets answers
