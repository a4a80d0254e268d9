"""The receive side of the emulated RoCE NIC: bpf/nic/responder.c on a host's port.

NicResponder compiles (or loads from dataplane.xdp.bpfcache) the responder object, fills
its ICRC table, configures it, attaches it to interfaces in any namespace and reads
its per-QP statistics as plain dicts. Nothing is pinned; the object lives as long as
this process holds it, and close() (or leaving the `with` block, also on an error)
detaches every program this instance attached.

Times in the configuration are real-fabric time (microseconds) converted to the lab's
wall clock through its scale (dataplane.timescale), as the Python transport does.
"""
from __future__ import annotations

import ctypes as ct
import ipaddress
import mmap
import socket
import zlib
from pathlib import Path

from dataplane import timescale
from dataplane.closing import Closing
from dataplane.kernel.netns import in_netns
from dataplane.nic.ringbuf import RingBuffer
from dataplane.xdp import bpfcache, bpfio
from dataplane.xdp.bpfio import BpfMaps, DataplaneError
from dataplane.runtime.labspec import XDP_ATTACH_MODE

NIC_DIR = Path(__file__).resolve().parent.parent.parent / "bpf" / "nic"
RESPONDER_C = NIC_DIR / "responder.c"
PROG_NAME = "xdp_nic_responder"
PASS_PROG_NAME = "xdp_nic_pass"

# mirrors of bpf/nic/nic.h
MODES = {"off": 0, "count": 1, "respond": 2}
F_CONSUME, F_OPEN_LOOP, F_SELECTIVE = 1, 2, 4
COUNTERS = ("rx", "not_roce", "not_data", "no_railab", "data", "qp_full", "acks", "naks",
            "cnps", "cnp_deferred", "pass", "drop", "tx_fail", "no_table", "event_lost",
            "bin_out", "feedback", "feedback_unknown", "pause", "pause_unknown", "stale")
C_MAX = 21
SEEN_BITS = 128
MAX_REQS = 1024
NAK_RING = 16
REQ_ACKED = 1
MAX_PAUSES = 256
PRIOS = 8
REORDER_SLOTS = 32
LOG_SLOTS = 128
MSG_SLOTS = 8
SEEN_BITS = 128
LOSS_SLOTS, LOSS_LAST = 64, 62      # nic_loss.win: slots 0-61 the first windows, 62 the latest
LOSS_NO_STAMP, LOSS_BACKWARDS, LOSS_AT_START, LOSS_FLAT = 1, 2, 4, 8
DEFAULT_MAX_QPS = 1024
RX_BINS = 16384
EVENT_PAGES = 256
ACK_DSCP = 26           # roce.DSCP_DATA: build_ack's default
CNP_DSCP = 48           # roce.DSCP_CNP
ROCE_PORT = 4791


class NicCfg(ct.Structure):
    _fields_ = [("mode", ct.c_uint32), ("flags", ct.c_uint32), ("ack_every", ct.c_uint32),
                ("reply_sport", ct.c_uint16), ("ack_dscp", ct.c_uint8), ("cnp_dscp", ct.c_uint8),
                ("ack_delay_ns", ct.c_uint64), ("cnp_interval_ns", ct.c_uint64),
                ("bin_origin_ns", ct.c_uint64), ("bin_ns", ct.c_uint64),
                ("nak_delay_ns", ct.c_uint64), ("not_before_ns", ct.c_uint64)]


class NicReq(ct.Structure):
    """nic_reqs' value: what came back for one of our requester QPs (nic.h)."""
    _fields_ = [("acks", ct.c_uint64), ("naks", ct.c_uint64), ("cnps", ct.c_uint64),
                ("becns", ct.c_uint64), ("ack_psn", ct.c_uint32), ("flags", ct.c_uint32),
                ("nak_psn", ct.c_uint32 * NAK_RING), ("_pad", ct.c_uint32 * 6)]


class NicPause(ct.Structure):
    """nic_pauses' value: the PFC pauses one host port received from its switch port (nic.h)."""
    _fields_ = [("until_ns", ct.c_uint64 * PRIOS), ("opened_ns", ct.c_uint64 * PRIOS),
                ("paused_ns", ct.c_uint64 * PRIOS), ("frames", ct.c_uint64), ("xon", ct.c_uint64),
                ("quantum_ps", ct.c_uint64), ("_pad", ct.c_uint64 * 5)]


class MsgEvent(ct.Structure):
    """nic_events' record: a message whose every packet arrived."""
    _fields_ = [("daddr", ct.c_uint32), ("dqpn", ct.c_uint32), ("flow_id", ct.c_uint32),
                ("msg_id", ct.c_uint32), ("done_ns", ct.c_uint64), ("msg_ns", ct.c_uint64),
                ("msg_bytes", ct.c_uint32), ("_pad", ct.c_uint32)]


class QpKey(ct.Structure):
    _fields_ = [("daddr", ct.c_uint32), ("dqpn", ct.c_uint32)]


class MsgSlot(ct.Structure):
    _fields_ = [("msg_id", ct.c_uint32), ("got", ct.c_uint32)]


class LossWindow(ct.Structure):
    _fields_ = [("t0", ct.c_uint64), ("t1", ct.c_uint64), ("lost", ct.c_uint64)]


class NicLoss(ct.Structure):
    _fields_ = [("flags", ct.c_uint64), ("t0", ct.c_uint64), ("run", ct.c_uint64),
                ("windows", ct.c_uint64), ("win", LossWindow * LOSS_SLOTS),
                ("stamp", ct.c_uint64 * SEEN_BITS)]


_QP_U32 = ("lock", "flags", "saddr", "src_qp", "flow_id", "sport", "psn0", "epsn", "msn",
           "unacked")
_QP_STATS = ("packets", "bytes", "payload_bytes", "duplicates", "out_of_order", "holes", "late",
             "ce", "first_ns", "last_ns", "lat_sum", "lat_min", "lat_max", "lat_bad", "messages",
             "msg_sum", "acks", "naks", "cnps", "cnp_deferred", "discarded")


class NicQp(ct.Structure):
    _fields_ = ([(n, ct.c_uint32) for n in _QP_U32]
                + [("last_ack_ns", ct.c_uint64), ("last_cnp_ns", ct.c_uint64),
                   ("highest", ct.c_uint32), ("_pad", ct.c_uint32),
                   ("seen_lo", ct.c_uint64), ("seen_hi", ct.c_uint64)]
                + [(n, ct.c_uint64) for n in _QP_STATS]
                + [("msg_slots", MsgSlot * MSG_SLOTS), ("reorder_hist", ct.c_uint64 * REORDER_SLOTS),
                   ("lat_hist", ct.c_uint64 * LOG_SLOTS), ("msg_hist", ct.c_uint64 * LOG_SLOTS),
                   ("max_gap_ns", ct.c_uint64), ("last_send_ns", ct.c_uint64),
                   ("hole_ns", ct.c_uint64 * SEEN_BITS), ("naked_ns", ct.c_uint64 * SEEN_BITS),
                   ("nak_cursor", ct.c_uint32), ("ack_owed_psn", ct.c_uint32),
                   ("loss", NicLoss)])


class CrcTable(ct.Structure):
    _fields_ = [("t", ct.c_uint32 * 256)]


def crc_table() -> list[int]:
    """The reflected CRC-32 table (polynomial 0xEDB88320) zlib.crc32 uses."""
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table.append(c)
    # the same CRC as zlib (roce.compute_icrc) or nothing: a wrong table is a silent disaster
    assert zlib.crc32(b"\x01") == _crc(table, b"\x01")
    return table


def _crc(table: list[int], data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def log_slot_low(slot: int) -> int:
    """Smallest value (ns) of a lat_hist / msg_hist slot (bpf/nic/stats.h nic_log_slot)."""
    if slot < 8:
        return min(slot, 4)     # 4..7 are never used: 4 is 4 << 2 | 0 = slot 8
    e, m = slot >> 2, slot & 3
    return (4 + m) << (e - 2)


def log_slot(value: int) -> int:
    """The slot nic_log_slot() gives `value` (for tests and readers)."""
    value &= (1 << 62) - 1
    if value < 4:
        return value
    e = value.bit_length() - 1
    if e > 31:
        return LOG_SLOTS - 1
    return (e << 2) | ((value >> (e - 2)) & 3)


def _qp_key(address: str, qpn: int) -> QpKey:
    return QpKey(socket.htonl(int(ipaddress.IPv4Address(address))), qpn)


def _mac_key(mac: str) -> ct.c_uint64:
    """nic_pause_ports' key: the MAC's 6 bytes in memory order in a zeroed u64."""
    raw = bytes.fromhex(mac.replace(":", ""))
    if len(raw) != 6:
        raise ValueError(f"bad MAC address {mac!r}")
    return ct.c_uint64.from_buffer_copy(raw + b"\0\0")


def _ip(be: int) -> str:
    return str(ipaddress.IPv4Address(socket.ntohl(be)))


def _sparse(hist) -> dict[int, int]:
    return {i: int(v) for i, v in enumerate(hist) if v}


def qp_dict(key: QpKey, q: NicQp) -> dict:
    """One QP's state and statistics as plain values (histograms sparse: slot -> count)."""
    d = {"daddr": _ip(key.daddr), "dqpn": key.dqpn, "saddr": _ip(q.saddr),
         "src_qp": q.src_qp, "flow_id": q.flow_id, "sport": q.sport,
         "psn0": q.psn0, "epsn": q.epsn, "msn": q.msn, "highest": q.highest}
    d.update({n: int(getattr(q, n)) for n in _QP_STATS})
    if not d["packets"] or d["lat_min"] == 2**64 - 1:
        d["lat_min"] = 0
    measured = d["packets"] - d["lat_bad"]
    d["lat_mean"] = d["lat_sum"] / measured if measured > 0 else 0.0
    d["open_holes"] = d["holes"] - d["out_of_order"]
    d["reorder_hist"] = _sparse(q.reorder_hist)
    d["lat_hist"] = _sparse(q.lat_hist)
    d["msg_hist"] = _sparse(q.msg_hist)
    d["max_gap_ns"] = int(q.max_gap_ns)
    d["last_send_ns"] = int(q.last_send_ns)
    d["messages_open"] = sum(1 for slot in q.msg_slots if slot.got)
    d["loss"] = loss_dict(q)
    return d


def loss_dict(q: NicQp) -> dict:
    """A QP's loss-window state (bpf/nic/stats.h; dataplane.nic.report finishes it):
    flags, the stamp before the run being built (t0) and its length (run), the windows
    closed (count; the first ones and, past LOSS_LAST of them, the latest one) as
    (stamp before, stamp after, lost), and the positions still in the window, oldest
    first: each one's send stamp, or None when it has not arrived."""
    lo = q.loss
    seen = (q.seen_hi << 64) | q.seen_lo
    window = [int(lo.stamp[(q.highest - back) % SEEN_BITS]) if seen >> back & 1 else None
              for back in range(SEEN_BITS - 1, -1, -1)]
    win = [(int(w.t0), int(w.t1), int(w.lost)) for w in lo.win]
    return {"flags": int(lo.flags), "t0": int(lo.t0), "run": int(lo.run), "windows": int(lo.windows),
            "first": win[:min(lo.windows, LOSS_LAST)],
            "latest": win[LOSS_LAST] if lo.windows > LOSS_LAST else None, "window": window}


class NicResponder(Closing):
    """The responder object: load, configure, attach, read, close (module doc)."""

    def __init__(self, *, max_qps: int = DEFAULT_MAX_QPS, max_reqs: int = MAX_REQS,
                 max_pauses: int = MAX_PAUSES, **config):
        if not 1 <= max_qps <= 1 << 20:
            raise ValueError("max_qps must be 1..2**20")
        if not 1 <= max_reqs <= 1 << 20 or not 1 <= max_pauses <= 1 << 16:
            raise ValueError("max_reqs must be 1..2**20, max_pauses 1..2**16")
        self.max_qps, self.max_reqs, self.max_pauses = max_qps, max_reqs, max_pauses
        self.cflags = [f"-I{NIC_DIR}", f"-DNIC_MAX_QPS={max_qps}", f"-DNIC_MAX_REQS={max_reqs}",
                       f"-DNIC_MAX_PAUSES={max_pauses}"]
        self._object = bpfcache.load(RESPONDER_C, self.cflags, {
            PROG_NAME: bpfcache.PROG_XDP, PASS_PROG_NAME: bpfcache.PROG_XDP})
        self._attached: list[tuple[str | None, int, int, str]] = []    # (netns, ifindex, prog fd, mode)
        self._events: RingBuffer | None = None
        self._closed = False
        try:
            self.load_seconds = self._object.seconds
            self.bpf_cache = self._object.cache
            self.prog_fd = self._object.progs[PROG_NAME]
            self.pass_prog_fd = self._object.progs[PASS_PROG_NAME]
            self.maps = BpfMaps(dict(self._object.maps))
            table = CrcTable()
            table.t[:] = crc_table()
            self.maps.update("nic_crc", ct.c_uint32(0), table)
            self.configure(**config)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ configuration
    def configure(self, *, mode: str = "respond", ack_every: int = 0, ack_delay_us: float = 0.0,
                  cnp_interval_us: float = 0.0, scale: float | None = None, consume: bool = False,
                  open_loop: bool = False, reply_sport: int = ROCE_PORT, ack_dscp: int = ACK_DSCP,
                  cnp_dscp: int = CNP_DSCP, bin_origin_ns: int = 0,
                  bin_ns: int = 1_000_000, selective: bool = False,
                  nak_delay_us: float = 0.0, not_before_ns: int = 0) -> NicCfg:
        """Write the whole configuration. Times are real-fabric microseconds at the lab's
        `scale` (None: wall time). mode: off (everything passes untouched), count
        (accounting only, everything passes), respond (accounting + ACK/NAK/CNP).
        open_loop: answer as the open-loop receiver does (an ACK per ack-request, no NAK);
        else as a go-back-N responder, or with `selective` as a selective-repeat one (a
        hole open nak_delay_us gets its own NAK). consume: drop the data frames after
        booking them.
        bin_origin_ns: CLOCK_MONOTONIC start of the delivered-bytes bins (0: none), each
        bin_ns wall ns long. not_before_ns: CLOCK_MONOTONIC; data frames sent before it are an
        earlier run's: counted as `stale`, never booked (0: none are)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        if not 0 <= ack_every < 2**32:
            raise ValueError("ack_every must be 0..2**32-1")
        if not 0 <= ack_dscp < 64 or not 0 <= cnp_dscp < 64:
            raise ValueError("a DSCP is 0..63")
        if not 0 < reply_sport < 65536:
            raise ValueError("reply_sport must be 1..65535")
        if min(ack_delay_us, cnp_interval_us, nak_delay_us, bin_origin_ns, not_before_ns) < 0 or bin_ns <= 0:
            raise ValueError("times must be >= 0 (bin_ns > 0)")
        if selective and open_loop:
            raise ValueError("an open-loop responder does not repeat selectively")
        flags = (F_CONSUME if consume else 0) | (F_OPEN_LOOP if open_loop else 0) | \
            (F_SELECTIVE if selective else 0)
        cfg = NicCfg(mode=MODES[mode], flags=flags, ack_every=ack_every,
                     bin_origin_ns=bin_origin_ns, bin_ns=bin_ns, not_before_ns=not_before_ns,
                     reply_sport=reply_sport, ack_dscp=ack_dscp, cnp_dscp=cnp_dscp,
                     ack_delay_ns=timescale.wall_ns(ack_delay_us * 1000, scale),
                     cnp_interval_ns=timescale.wall_ns(cnp_interval_us * 1000, scale),
                     nak_delay_ns=timescale.wall_ns(nak_delay_us * 1000, scale))
        self.maps.update("nic_cfg", ct.c_uint32(0), cfg)
        self.config = cfg
        return cfg

    # ------------------------------------------------------------ the requester side
    def add_requester(self, address: str, qpn: int, slot: int) -> None:
        """Book the ACKs, NAKs and CNPs that come back for our QP `qpn` at `address` in
        nic_reqs[slot] (zeroed now), and drop them there."""
        if not 0 <= slot < self.max_reqs:
            raise ValueError(f"requester slot {slot}: this NIC has {self.max_reqs}")
        self.maps.update("nic_reqs", ct.c_uint32(slot), NicReq())
        self.maps.update("nic_req_slots", _qp_key(address, qpn), ct.c_uint32(slot))

    def requester(self, slot: int) -> NicReq:
        """nic_reqs[slot] as the program left it."""
        r = NicReq()
        self.maps.lookup("nic_reqs", ct.c_uint32(slot), r)
        return r

    @property
    def requesters_fd(self) -> int:
        """The fd of nic_reqs (memory-mappable, max_reqs x 128 bytes): the send engine's view."""
        return self.maps.fds["nic_reqs"]

    def _clear_requesters(self) -> None:
        lib, fd = bpfio._lib(), self.maps.fds["nic_req_slots"]
        key = QpKey()
        while lib.bpf_get_next_key(fd, None, ct.byref(key)) == 0:
            self.maps.delete("nic_req_slots", key)

    # ------------------------------------------------------------ PFC
    def add_pause_port(self, switch_mac: str, slot: int, quantum_ns: float) -> None:
        """Book the PFC frames from `switch_mac` (the switch port a host port faces) in
        nic_pauses[slot] (zeroed now) and drop them there. quantum_ns: wall ns of one pause
        quantum (dataplane.wire.pfc.quanta_wall_seconds(1, nominal_bps, scale) * 1e9)."""
        if not 0 <= slot < self.max_pauses:
            raise ValueError(f"pause slot {slot}: this NIC has {self.max_pauses}")
        if not 0 < quantum_ns < 2**32:
            raise ValueError(f"quantum_ns {quantum_ns}: must be > 0 (and under 4 s)")
        self.maps.update("nic_pauses", ct.c_uint32(slot), NicPause(quantum_ps=round(quantum_ns * 1000)))
        self.maps.update("nic_pause_ports", _mac_key(switch_mac), ct.c_uint32(slot))

    def pause(self, slot: int) -> NicPause:
        """nic_pauses[slot] as the program left it."""
        p = NicPause()
        self.maps.lookup("nic_pauses", ct.c_uint32(slot), p)
        return p

    @property
    def pauses_fd(self) -> int:
        """The fd of nic_pauses (memory-mappable, max_pauses x 256 bytes): the send engine's view."""
        return self.maps.fds["nic_pauses"]

    def _clear_pause_ports(self) -> None:
        lib, fd = bpfio._lib(), self.maps.fds["nic_pause_ports"]
        key, slot = ct.c_uint64(), ct.c_uint32()
        while lib.bpf_get_next_key(fd, None, ct.byref(key)) == 0:
            if self.maps.lookup("nic_pause_ports", key, slot):
                self.maps.update("nic_pauses", slot, NicPause())
            self.maps.delete("nic_pause_ports", key)

    # ------------------------------------------------------------ attach / detach
    @staticmethod
    def ifindex(netns: str | None, ifname: str | int) -> int:
        if isinstance(ifname, int):
            return ifname
        with in_netns(netns):
            try:
                return socket.if_nametoindex(ifname)
            except OSError:
                raise DataplaneError(f"no interface {ifname} in netns {netns or '(this one)'}") from None

    def attach(self, netns: str | None, ifname: str | int, *, mode: str = "drv",
               peer_pass: bool = False) -> str:
        """Attach the responder (or, with peer_pass, the XDP_PASS program a veth peer
        needs to receive XDP_TX frames) to an interface. mode: drv/generic, or a lab's
        dataplane name (xdp, xdp-generic). Returns the mode used."""
        mode = XDP_ATTACH_MODE.get(mode, mode)
        ifindex = self.ifindex(netns, ifname)
        fd = self.pass_prog_fd if peer_pass else self.prog_fd
        used = bpfio.attach_xdp(netns, ifindex, fd, mode=mode)
        self._attached.append((netns, ifindex, fd, used))
        return used

    def detach(self, netns: str | None, ifname: str | int) -> None:
        """Detach our program from an interface (someone else's stays)."""
        ifindex = self.ifindex(netns, ifname)
        self._detach([e for e in self._attached if e[:2] == (netns, ifindex)])

    def detach_all(self) -> None:
        self._detach(list(self._attached))

    def _detach(self, entries: list) -> None:
        """One netlink batch per namespace; every entry is forgotten, the failures raised."""
        errors = []
        for netns in dict.fromkeys(e[0] for e in entries):
            ports = {ifindex: (fd, mode) for ns, ifindex, fd, mode in entries if ns == netns}
            try:
                bpfio.detach_own_xdp(netns, ports)
            except (OSError, DataplaneError) as e:
                errors.append(f"{netns}: {e}")
        self._attached = [e for e in self._attached if e not in entries]
        if errors:
            raise DataplaneError("detach failed: " + "; ".join(errors))

    # ------------------------------------------------------------ reading
    def counters(self) -> dict[str, int]:
        """The program's counters, summed over CPUs."""
        out = {}
        for i, name in enumerate(COUNTERS):
            out[name] = sum(self.maps.percpu("nic_counters", i, ct.c_uint64))
        return out

    def _keys(self) -> list[QpKey]:
        lib, fd = bpfio._lib(), self.maps.fds["nic_qps"]
        keys, prev = [], None
        while True:
            key = QpKey()
            if lib.bpf_get_next_key(fd, None if prev is None else ct.byref(prev), ct.byref(key)) != 0:
                return keys
            keys.append(key)
            prev = key

    def qp(self, daddr: str, dqpn: int) -> dict | None:
        key = _qp_key(daddr, dqpn)
        q = NicQp()
        return qp_dict(key, q) if self.maps.lookup("nic_qps", key, q) else None

    def qps(self) -> list[dict]:
        """Every QP's state and statistics, ordered by (address, QP)."""
        out = []
        for key in self._keys():
            q = NicQp()
            if self.maps.lookup("nic_qps", key, q):
                out.append(qp_dict(key, q))
        return sorted(out, key=lambda d: (ipaddress.IPv4Address(d["daddr"]), d["dqpn"]))

    def rx_bins(self, count: int = RX_BINS) -> dict[int, int]:
        """Delivered frame bytes per bin (configure's bin_origin_ns, bin_ns) of the first
        `count` bins, the empty ones left out."""
        out = {}
        for i in range(min(count, RX_BINS)):
            n = sum(self.maps.percpu("nic_rx_bins", i, ct.c_uint64))
            if n:
                out[i] = n
        return out

    def events(self) -> list[MsgEvent]:
        """The message completions booked since the last call (the ring buffer, consumed)."""
        if self._events is None:
            self._events = RingBuffer(self.maps.fds["nic_events"], EVENT_PAGES * mmap.PAGESIZE)
        return [MsgEvent.from_buffer_copy(r) for r in self._events.read()]

    def reset(self) -> None:
        """Forget every QP, requester and pause port (their pause slots zeroed), zero the
        counters and bins and drop unread events (the configuration stays)."""
        for key in self._keys():
            self.maps.delete("nic_qps", key)
        self._clear_requesters()
        self._clear_pause_ports()
        for i in range(C_MAX):
            self.maps.zero_percpu("nic_counters", i, ct.c_uint64)
        for i in self.rx_bins():
            self.maps.zero_percpu("nic_rx_bins", i, ct.c_uint64)
        self.events()

    def verified_insns(self) -> int:
        """Instructions the verifier processed to load the responder (its 1M budget)."""
        return bpfcache.prog_info(self.prog_fd).verified_insns

    # ------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Detach what we attached, then release the object. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.detach_all()
        finally:
            if self._events is not None:
                self._events.close()
            self._object.close()


def prog_id_of(fd: int) -> int:
    return bpfcache.prog_info(fd).id
