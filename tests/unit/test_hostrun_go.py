"""The runner's "go" line to the host senders (dataplane.traffic.hostrun.read_go)."""
import io

import pytest

from dataplane.traffic import hostrun


@pytest.mark.parametrize("line, start", [("go\n", 0), ("go 123456789\n", 123456789),
                                         ("stop\n", None), ("go soon\n", None), ("", None),
                                         ("go 1 2\n", None)])
def test_read_go(monkeypatch, line, start):
    monkeypatch.setattr("sys.stdin", io.StringIO(line))
    assert hostrun.read_go() == start
