"""A deploy whose agent exited before "go" fails with the agent's last log line (it used
to surface as a BrokenPipeError, which the CLI treats as a closed stdout: exit 0)."""
import pytest

from dataplane.errors import RuntimeStateError
from dataplane.runtime import lifecycle, state


class _DeadPipe:
    def write(self, data):
        raise BrokenPipeError(32, "Broken pipe")

    def close(self):
        pass


class _Agent:
    stdin = _DeadPipe()


def test_go_to_an_exited_agent_is_the_deploys_error(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "STATE_ROOT", tmp_path)
    log = state.agent_log("lab1")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("Traceback ...\nValueError: max_ports must be 1..65536 (slots are u16)\n")
    with pytest.raises(RuntimeStateError, match="agent failed: ValueError: max_ports"):
        lifecycle._send_go("lab1", _Agent())
