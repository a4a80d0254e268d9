"""Closed-loop RoCE transport per queue pair: reliable delivery and DCQCN (pure state
machines; the sockets live in dataplane.traffic.reliable and receiver.capture).

Positions: a QP's packets are numbered 0, 1, ... (PSN = initial PSN + position, mod
2^24); both ends unwrap PSNs to positions near what they expect.

Reliable delivery (what an RC QP of a RoCEv2 NIC does):
  * go-back-n: the responder accepts only the next expected position; it ACKs (BTH opcode
    ACKNOWLEDGE, AETH syndrome 0x1f, PSN = last in-order packet) every `ack_every`
    packets, for the first in-order packet `ack_delay` or more after its last ACK, and on
    every packet with the ack-request bit (the last of each message); on
    the first packet past a gap it sends one NAK (AETH syndrome 0x60, PSN sequence error,
    PSN = the expected one) and discards everything out of order until the gap is
    filled. The requester goes back to the NAKed position and resends from there.
  * selective-repeat: the responder keeps out-of-order packets (a reorder buffer) and
    ACKs cumulatively; a hole still open `nak_delay` after it was first seen is NAKed
    on its own (one PSN), and the requester resends only that packet. IB's RC has no
    selective NAK: this is what newer NICs (and IRN) add; railab carries it as a NAK
    with the hole's PSN.
  * both: a retransmission timeout (`rto`) without progress of the oldest unacked
    position resends from it (go-back-n: everything after it too), and at most `window`
    packets are unacknowledged at a time.
Messages complete at the responder when its in-order point passes their last packet:
every byte arrived.

DCQCN (Zhu et al., SIGCOMM 2015), reaction point per QP: current rate Rc, target rate
Rt, alpha. CNP: Rt = Rc, Rc = Rc (1 - alpha/2), alpha = (1 - g) alpha + g, and the
increase counters restart. alpha decays, alpha = (1 - g) alpha, every K without a CNP.
Increase events come from a timer (every T) and a byte counter (every B bytes sent);
each sets Rc = (Rt + Rc)/2 after adjusting Rt: the first F events of both counters are
fast recovery (Rt unchanged); once one counter is past F, additive increase Rt += R_AI;
once both are, hyper increase Rt += i R_HAI (i = the smaller count - F). Times are real-fabric time (microseconds), stretched to the
lab's wall clock through dataplane.timescale; R_AI and R_HAI are fractions of the
port's line rate (the paper's 40 Mb/s at 40 Gb/s is 1/1000), so they scale with the
emulated port speed.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from dataplane import timescale
from dataplane.wire.roce import PSN_MASK, PSN_MOD

TRANSPORTS = ("open-loop", "go-back-n", "selective-repeat")


@dataclass(frozen=True)
class DcqcnParams:
    """DCQCN's parameters: the paper's values at 40 Gb/s (times in real-fabric us)."""
    g: float = 1 / 256
    cnp_interval_us: float = 50.0        # N: at most one CNP per QP per N (notification point)
    alpha_timer_us: float = 55.0         # K: alpha decays after K without a CNP
    rate_timer_us: float = 55.0          # T: rate-increase timer
    byte_counter: int = 10 * 1024 * 1024  # B: rate-increase byte counter (10 MB)
    fast_recovery: int = 5               # F: increase events spent in fast recovery
    rai_fraction: float = 40e6 / 40e9    # R_AI: 40 Mb/s at 40 Gb/s
    rhai_fraction: float = 400e6 / 40e9  # R_HAI: 10 R_AI (see README: not in the paper's text we had)
    min_rate_fraction: float = 1e-3      # floor for Rc (the NIC never stops a QP)

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class TransportConfig:
    """One run's transport (from the workload file). Times in real-fabric us."""
    kind: str = "open-loop"
    ack_every: int = 8             # ACK coalescing: one ACK per this many in-order packets ...
    ack_delay_us: float = 20.0     # ... or for the first in-order packet this long after the last ACK
    window: int = 64               # most packets unacknowledged at a time
    rto_us: float = 200.0          # retransmission timeout
    nak_delay_us: float = 20.0     # selective repeat: how long a hole may stay open before its NAK
    dcqcn: DcqcnParams | None = None

    @property
    def closed_loop(self) -> bool:
        return self.kind != "open-loop"

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "dcqcn"}
        d["dcqcn"] = None if self.dcqcn is None else \
            {f.name: getattr(self.dcqcn, f.name) for f in fields(self.dcqcn)}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TransportConfig":
        dc = d.get("dcqcn")
        return cls(**{**{k: v for k, v in d.items() if k != "dcqcn"},
                      "dcqcn": DcqcnParams(**dc) if dc else None})


def position(psn: int, psn0: int, near: int) -> int:
    """The position whose PSN is `psn`, the one nearest to `near` (24-bit wrap)."""
    d = (psn - psn0 - near) & PSN_MASK
    if d >= PSN_MOD // 2:
        d -= PSN_MOD
    return near + d


class Dcqcn:
    """DCQCN reaction point of one QP (module doc). Rates in bits/s of the lab's ports,
    times in wall ns (monotonic)."""

    def __init__(self, params: DcqcnParams, line_bps: float, scale: float | None, now_ns: int):
        self.p = params
        self.line = float(line_bps)
        self.rc = self.rt = self.line
        self.alpha = 1.0
        self.alpha_period = max(1, timescale.wall_ns(params.alpha_timer_us * 1000, scale))
        self.rate_period = max(1, timescale.wall_ns(params.rate_timer_us * 1000, scale))
        self.next_alpha = now_ns + self.alpha_period
        self.next_rate = now_ns + self.rate_period
        self.timer_events = 0
        self.byte_events = 0
        self.bytes = 0
        self.cnps = 0

    def on_cnp(self, now_ns: int) -> None:
        self.cnps += 1
        self.rt = self.rc
        self.rc = max(self.line * self.p.min_rate_fraction, self.rc * (1 - self.alpha / 2))
        self.alpha = (1 - self.p.g) * self.alpha + self.p.g
        self.timer_events = self.byte_events = self.bytes = 0
        self.next_alpha = now_ns + self.alpha_period
        self.next_rate = now_ns + self.rate_period

    def on_sent(self, nbytes: int) -> None:
        self.bytes += nbytes
        while self.bytes >= self.p.byte_counter:
            self.bytes -= self.p.byte_counter
            self.byte_events += 1
            self._increase()

    def tick(self, now_ns: int) -> None:
        while now_ns >= self.next_alpha:
            self.alpha *= 1 - self.p.g
            self.next_alpha += self.alpha_period
        while now_ns >= self.next_rate:
            self.timer_events += 1
            self._increase()
            self.next_rate += self.rate_period

    def _increase(self) -> None:
        f = self.p.fast_recovery
        lo, hi = sorted((self.timer_events, self.byte_events))
        if lo > f:
            self.rt += (lo - f) * self.p.rhai_fraction * self.line
        elif hi > f:
            self.rt += self.p.rai_fraction * self.line
        self.rt = min(self.rt, self.line)
        self.rc = min((self.rt + self.rc) / 2, self.line)


@dataclass
class RequesterStats:
    acks: int = 0
    naks: int = 0
    timeouts: int = 0
    retx_packets: int = 0
    retx_bytes: int = 0
    cnps: int = 0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class Requester:
    """Sending side of one QP: which position goes next (module doc)."""

    def __init__(self, npkts: int, cfg: TransportConfig, scale: float | None, now_ns: int):
        self.n = npkts
        self.sr = cfg.kind == "selective-repeat"
        self.window = cfg.window
        self.rto = max(1, timescale.wall_ns(cfg.rto_us * 1000, scale))
        self.una = 0              # oldest position not acknowledged
        self.nxt = 0              # next new (or, after go-back, resent) position
        self.sent_max = 0         # one past the highest position ever sent
        self.resend: list[int] = []   # selective repeat: NAKed positions to resend
        self.progress_ns = now_ns
        self.stats = RequesterStats()

    @property
    def done(self) -> bool:
        return self.una >= self.n

    def next_position(self) -> int | None:
        """The position to send now, None when nothing may go (done or window full)."""
        while self.resend and self.resend[0] < self.una:
            self.resend.pop(0)
        if self.resend:
            return self.resend[0]
        if self.nxt < self.n and self.nxt - self.una < self.window:
            return self.nxt
        return None

    def sent(self, pos: int, nbytes: int, now_ns: int) -> None:
        if self.una >= self.sent_max:
            self.progress_ns = now_ns    # nothing was outstanding: the timer starts now
        if self.resend and self.resend[0] == pos:
            self.resend.pop(0)
        elif pos == self.nxt:
            self.nxt += 1
        if pos < self.sent_max:
            self.stats.retx_packets += 1
            self.stats.retx_bytes += nbytes
        else:
            self.sent_max = pos + 1

    def on_ack(self, pos: int, now_ns: int) -> None:
        self.stats.acks += 1
        self._advance(pos + 1, now_ns)

    def on_nak(self, pos: int, now_ns: int) -> None:
        self.stats.naks += 1
        if self.sr:
            if pos >= self.una and pos < self.sent_max and pos not in self.resend:
                self.resend.append(pos)
                self.resend.sort()
            return
        self._advance(pos, now_ns)      # a sequence-error NAK acknowledges what came before
        if self.una <= pos <= self.sent_max:
            self.nxt = pos

    def _advance(self, una: int, now_ns: int) -> None:
        if una > self.una:
            self.una = min(una, self.n)
            self.progress_ns = now_ns
            if self.nxt < self.una:
                self.nxt = self.una

    def check_timeout(self, now_ns: int) -> bool:
        if self.una >= self.sent_max or now_ns - self.progress_ns < self.rto:
            return False
        self.stats.timeouts += 1
        self.progress_ns = now_ns
        if self.sr:
            if self.una not in self.resend:
                self.resend.insert(0, self.una)
        else:
            self.nxt = self.una
        return True


@dataclass
class ResponderStats:
    acks: int = 0
    naks: int = 0
    cnps: int = 0
    discarded: int = 0            # go-back-n: out-of-order packets thrown away
    buffered_max: int = 0         # selective repeat: most packets held in the reorder buffer
    messages: list = field(default_factory=list)   # [msg bytes, completion ns] per message

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class QpResponder:
    """Receiving side of one QP. on_data() returns what to send back: a list of
    ("ack" | "nak", position)."""

    def __init__(self, cfg: TransportConfig, scale: float | None):
        self.sr = cfg.kind == "selective-repeat"
        self.ack_every = cfg.ack_every
        # NICs coalesce ACKs by count and by time: a QP that the NIC serves slowly (one of
        # many sharing it) still hears back within the delay, not after ack_every packets,
        # which could take longer than the requester's RTO and resend what had arrived.
        self.ack_delay = timescale.wall_ns(cfg.ack_delay_us * 1000, scale)
        self.last_ack_ns: int | None = None
        self.nak_delay = timescale.wall_ns(cfg.nak_delay_us * 1000, scale)
        self.expected = 0
        self.unacked = 0
        self.nak_open = False                       # go-back-n: a NAK for this gap went out
        self.buffer: dict[int, tuple | None] = {}   # selective repeat: position -> message end
        self.hole_seen: dict[int, int] = {}         # selective repeat: hole -> first seen ns
        self.naked: dict[int, int] = {}             # selective repeat: hole -> last NAK ns
        # selective repeat: the highest ack-requested position that arrived beyond a hole.
        # Its ACK is owed once the hole fills, by whatever packet fills it: the requester
        # asked, and without it would wait out its RTO for an ACK nothing else would send
        self.ack_owed: int | None = None
        self.stats = ResponderStats()

    def on_data(self, pos: int, ackreq: bool, msg_end: tuple | None, now_ns: int) -> list[tuple[str, int]]:
        """msg_end: (bytes, start ns) when the packet is the last of its message."""
        out: list[tuple[str, int]] = []
        if pos == self.expected:
            self._deliver(msg_end, now_ns)
            while self.expected in self.buffer:
                self._deliver(self.buffer.pop(self.expected), now_ns)
            self.nak_open = False
            for h in [h for h in self.hole_seen if h < self.expected]:
                self.hole_seen.pop(h)
                self.naked.pop(h, None)
            owed = self.ack_owed is not None and self.ack_owed < self.expected
            if owed:
                self.ack_owed = None
            if ackreq or owed or self.unacked >= self.ack_every or \
                    (self.last_ack_ns is not None and now_ns - self.last_ack_ns >= self.ack_delay):
                out.append(("ack", self.expected - 1))
                self.unacked = 0
        elif pos > self.expected:
            if self.sr:
                self.buffer[pos] = msg_end
                if ackreq:
                    self.ack_owed = max(pos, self.ack_owed or 0)
                self.stats.buffered_max = max(self.stats.buffered_max, len(self.buffer))
                for h in range(self.expected, pos):
                    if h not in self.buffer:
                        self.hole_seen.setdefault(h, now_ns)
            else:
                self.stats.discarded += 1
                if not self.nak_open:
                    self.nak_open = True
                    out.append(("nak", self.expected))
        else:
            # A duplicate: the requester resent because it missed our ACKs (or went back
            # past what we had); tell it again where we are, or it resends forever.
            out.append(("ack", self.expected - 1))
        if self.sr:
            for h, seen in sorted(self.hole_seen.items()):
                last = self.naked.get(h)
                if now_ns - seen >= self.nak_delay and (last is None or now_ns - last >= 4 * self.nak_delay + 1):
                    self.naked[h] = now_ns
                    out.append(("nak", h))
        if self.last_ack_ns is None:
            self.last_ack_ns = now_ns          # the coalescing timer starts with the first packet
        for kind, _ in out:
            if kind == "ack":
                self.stats.acks += 1
                self.last_ack_ns = now_ns
            else:
                self.stats.naks += 1
        return out

    def _deliver(self, msg_end: tuple | None, now_ns: int) -> None:
        self.expected += 1
        self.unacked += 1
        if msg_end is not None:
            size, start_ns = msg_end
            self.stats.messages.append([size, now_ns - start_ns])
