"""`railab bench nic`'s ACK turnaround measurement: real round trips through the XDP
responder and through the Python responder process (no timing asserted: that is the
bench's job, not a test's)."""
from __future__ import annotations

import subprocess

from dataplane.bench.ack import ack_turnaround


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_every_round_trip_is_answered_by_each_responder_and_nothing_is_left():
    before = _namespaces()
    result = ack_turnaround(round_trips=200)
    for who in ("kernel", "python"):
        r = result[who]
        assert (r["count"], r["missed"]) == (200, 0), who
        assert 0 < r["p50_us"] <= r["p99_us"] <= r["max_us"], who
    assert result["kernel"]["responder_acks"] == 200       # the XDP program answered, not the stack
    assert _namespaces() == before
