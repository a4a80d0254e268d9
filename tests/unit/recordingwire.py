"""A transmit socket for the closed-loop sender's unit tests: it records (monotonic ns,
frame) instead of sending, so a test reads what the sender put on the wire and when."""
from __future__ import annotations

import time


class RecordingWire:
    def __init__(self):
        self.sent: list[tuple[int, bytes]] = []

    def send(self, buf) -> int:
        self.sent.append((time.monotonic_ns(), bytes(buf)))
        return len(buf)
