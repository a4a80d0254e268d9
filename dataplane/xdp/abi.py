"""ctypes mirrors of the railab data-plane C structs and constants.

MUST STAY IN SYNC with bpf/railab_consts.h and bpf/railab_structs.h.
tests/bpf/test_abi.py compares every struct here with the ctypes type bcc
generates from the C (size and field offsets) and every constant with its
#define, so a drift fails the test suite.

Byte order: IPv4 addresses and fields named *_be are network order (build them
with ip_be()); everything else is host order.
"""

from __future__ import annotations

import ctypes as ct
import ipaddress
import socket
import sys

_LITTLE = sys.byteorder == "little"

# ---- default map sizes (overridable at load time with -D cflags) ----
MAX_PORTS = 4096
MAX_SWITCHES = 1024
MAX_GROUPS = 1024
MAX_MEMBERS = 64
MAX_MEMBER_ENTRIES = 65536   # members / member_stats: every group's range together
MAX_ROUTES = 65536
MAX_ADDRS = 16384
MAX_FLOWLETS = 65536
MAX_TM = 16384
PORT_INDEX_SLOTS = 9216      # port_index: ifindexes 0..PORT_INDEX_SLOTS-1 (agent: 2 * max_ports + 1024)
ROUTE_CACHE_SLOTS = 8192     # per-CPU route cache entries (power of two)
MAX_LEARNED = 16384
MAX_FLOWS_SEEN = 16384       # flow_seen (bpf/flows.h): (egress port, 5-tuple) entries, LRU
MAX_ARN_EXCL = 4096          # arn_excl: notice exclusions, all switches together
MAX_ARN_SENT = 16384         # arn_sent: notice rate-limit entries (LRU)

# ---- protocol numbers ----
RL_ETH_P_IP = 0x0800
RL_ETH_P_MAC_CONTROL = 0x8808
RL_ETH_P_ARP = 0x0806
RL_IPPROTO_TCP = 6
RL_IPPROTO_UDP = 17
ROCE_V2_UDP_PORT = 4791

# ---- drop reasons (index into port_stats.drops and drop_stats) ----
DROP_NONE = 0
DROP_PARSE_ERROR = 1
DROP_NOT_IPV4 = 2
DROP_NO_ROUTE = 3
DROP_TTL_EXPIRED = 4
DROP_NO_MEMBER = 5
DROP_PORT_DOWN = 6
DROP_UNKNOWN_PORT = 7
DROP_NOT_UNICAST = 8
DROP_QUEUE_FULL = 9
DROP_MEMBERS_DOWN = 10
DROP_PFC_HEADROOM = 11
DROP_REASON_MAX = 16

DROP_REASONS: dict[int, str] = {
    DROP_PARSE_ERROR: "parse_error",
    DROP_NOT_IPV4: "not_ipv4",
    DROP_NO_ROUTE: "no_route",
    DROP_TTL_EXPIRED: "ttl_expired",
    DROP_NO_MEMBER: "no_member",
    DROP_PORT_DOWN: "port_down",
    DROP_UNKNOWN_PORT: "unknown_port",
    DROP_NOT_UNICAST: "not_unicast",
    DROP_QUEUE_FULL: "queue_full",
    DROP_MEMBERS_DOWN: "members_down",
    DROP_PFC_HEADROOM: "pfc_headroom",
}

# ---- group modes ----
LB_MODE_ECMP = 0
LB_MODE_LBN = 1
LB_MODE_SPRAY_RANDOM = 2
LB_MODE_SPRAY_RR = 3
LB_MODE_FLOWLET = 4
LB_MODE_SPRAYLINK = 5
LB_MODE_WCMP = 6
LB_MODE_MAX = 7
# canonical names use '-' (CLI); '_' spellings are accepted by lb_mode()
LB_MODES: dict[str, int] = {
    "ecmp": LB_MODE_ECMP,
    "lbn": LB_MODE_LBN,
    "spray-random": LB_MODE_SPRAY_RANDOM,
    "spray-rr": LB_MODE_SPRAY_RR,
    "flowlet": LB_MODE_FLOWLET,
    "spraylink": LB_MODE_SPRAYLINK,
    "wcmp": LB_MODE_WCMP,
}
LB_MODE_NAMES: dict[int, str] = {v: k for k, v in LB_MODES.items()}

WCMP_SLOTS = 64
DOWN_MASK_BITS = 64
LB_SCAN_MAX = 8
UTIL_ONE = 1024
LB_LOAD_BANDS = 4            # load-aware picks grade ports in bands of 1/4 window (bpf/lb.h)
LB_PLACED_BANDS = 2          # a flowlet placed on a port its meter has not seen yet, in bands ...
LB_PLACED_FRAME = 1024       # ... if its first frame is this long; less if shorter
LB_PLACED_FRAME_SHIFT = 10

# ---- PFC (bpf/pfc.h) ----
PFC_RING = 64
PFC_POPS = 4
PFC_F_ON = 1 << 0
PFC_HELD = 1 << 63
PFC_TC_LOSSLESS = 0x10010
PFC_TC_OTHER = 0x10020
PFC_TC_CNP = 0x10030
PFC_CNP_DSCP = 48
ECN_P_ONE = 65536

# ---- ARN / FGLB notices in the data plane (bpf/railab_consts.h; dataplane/agent/monitor.py
# documents the 40-byte header) ----
ARN_UDP_PORT = 4792
ARN_MAGIC = 0x5241524E       # b"RARN" as a big-endian word
ARN_VERSION = 1
ARN_T_WITHDRAW = 1
ARN_T_RESTORE = 2
ARN_R_LINK_DOWN = 1
ARN_HDR_LEN = 40
ARN_FRAME_LEN = 82           # Ethernet + IPv4 + UDP + header
ARN_TOS = 0xC0               # DSCP CS6
ARN_NF_FLOWS = 0x1           # header flags: flow list follows (left to the agent)
ARN_NF_XDP = 0x2             # header flags: made by the data plane
ARN_F_GENERATE = 1 << 0      # arn_cfg.flags
ARN_F_CONSUME = 1 << 1
ARN_F_PASS = 1 << 2          # consumed notices go up the stack (captures see them)
ARN_F_WATCH = 1 << 3         # the data path checks a fabric link in the FIB before using it
ARN_PORT_F_FABRIC = 1 << 0   # arn_ports.flags: a switch-switch link
ARN_PORT_F_WATCHED = 1 << 1  # ... whose address has a connected route to dst_ip (link watch)
ARN_S_SENT = 0
ARN_S_SUPPRESSED = 1
ARN_S_TX_FAILED = 2
ARN_S_WITHDRAW_RX = 3
ARN_S_RESTORE_RX = 4
ARN_S_MALFORMED = 5
ARN_S_NOT_FABRIC = 6
ARN_S_IGNORED = 7
ARN_S_WATCH_DEAD = 8
ARN_S_WATCH_BLIND = 9
ARN_STAT_MAX = 10
RL_LOOPBACK_IFINDEX = 1       # the link watch's FIB lookups enter on lo
ARN_PROG_TX = 0              # arn_progs slots: the notice programs xdp_switch tail-calls
ARN_PROG_RX = 1
ARN_PROG_LINK_SCAN = 2       # ... the link watch's rescan
ARN_PROG_SWITCH = 3          # ... xdp_switch itself, run again after the rescan
ARN_PROGS = 4
ARN_STATS: dict[int, str] = {
    ARN_S_SENT: "sent",
    ARN_S_SUPPRESSED: "suppressed",
    ARN_S_TX_FAILED: "tx_failed",
    ARN_S_WITHDRAW_RX: "withdraw_received",
    ARN_S_RESTORE_RX: "restore_received",
    ARN_S_MALFORMED: "malformed",
    ARN_S_NOT_FABRIC: "not_fabric",
    ARN_S_IGNORED: "ignored",
    ARN_S_WATCH_DEAD: "watch_found_down",
    ARN_S_WATCH_BLIND: "watch_blind",
}


def lb_mode(mode: str | int) -> int:
    """Mode name ('spray-rr' or 'spray_rr') or LB_MODE_* value -> LB_MODE_* value."""
    if isinstance(mode, int):
        if not 0 <= mode < LB_MODE_MAX:
            raise ValueError(f"unknown group mode {mode}")
        return mode
    value = LB_MODES.get(str(mode).replace("_", "-"))
    if value is None:
        raise ValueError(f"unknown group mode {mode!r}; known: {', '.join(LB_MODES)}")
    return value

# ---- hash field flags ----
HASH_F_SRC_IP = 1 << 0
HASH_F_DST_IP = 1 << 1
HASH_F_PROTO = 1 << 2
HASH_F_SRC_PORT = 1 << 3
HASH_F_DST_PORT = 1 << 4
HASH_F_BTH_DQP = 1 << 5
HASH_F_INGRESS_PORT = 1 << 6
HASH_FIELDS_5TUPLE = 0x1F
HASH_FIELDS: dict[str, int] = {
    "src_ip": HASH_F_SRC_IP,
    "dst_ip": HASH_F_DST_IP,
    "proto": HASH_F_PROTO,
    "src_port": HASH_F_SRC_PORT,
    "dst_port": HASH_F_DST_PORT,
    "bth_dqp": HASH_F_BTH_DQP,
    "ingress_port": HASH_F_INGRESS_PORT,
}


def expand_hash_fields(fields) -> list[str]:
    """'5tuple,bth_dqp' / ['5tuple', 'bth_dqp'] -> names of HASH_FIELDS."""
    if isinstance(fields, str):
        fields = [f for f in fields.split(",") if f]
    out: list[str] = []
    for f in fields:
        names = ["src_ip", "dst_ip", "proto", "src_port", "dst_port"] if f == "5tuple" else [f]
        for n in names:
            if n not in HASH_FIELDS:
                raise ValueError(f"unknown hash field {n!r}; known: 5tuple, {', '.join(HASH_FIELDS)}")
            if n not in out:
                out.append(n)
    return out


# ---- flags ----
PORT_F_DOWN = 1 << 0
PORT_F_PROXY_ARP = 1 << 1
PORT_F_ARP_XDP_TX = 1 << 2
PORT_F_LEARN = 1 << 3
PORT_F_VALID = 1 << 15       # port_index entries only
SW_F_TM = 1 << 0
RC_F_VALID = 1 << 0
RC_F_LOCAL = 1 << 1
RC_F_ROUTE = 1 << 2
RC_F_TM = 1 << 3
QUEUE_F_REAL = 1 << 0        # port_queue.flags: frames go through the port's shaper qdisc
HANDOFF_MAGIC = 0x7261696C   # struct handoff.magic ("rail")
HANDOFF_GAP = 24             # sizeof(struct handoff): what a handed-off frame grows by
RL_VERDICT_QUEUED = 5

RL_XDP_ACTION_MAX = 6
FLOW_CFG_F_ON = 1 << 0        # flow_cfg.flags (bpf/flows.h): account frames in flow_seen
# verdict_stats keys: XDP actions, then 5 = handed to a real queue (XDP_PASS to tc_handoff)
XDP_ACTIONS: dict[int, str] = {0: "aborted", 1: "drop", 2: "pass", 3: "tx", 4: "redirect",
                               5: "queued"}


class PortInfo(ct.Structure):
    """value of `ports` (key: c_uint32 ifindex)"""
    _fields_ = [
        ("switch_id", ct.c_uint32),
        ("slot", ct.c_uint32),
        ("flags", ct.c_uint16),
        ("lbn", ct.c_uint16),
        ("mac", ct.c_uint8 * 6),
        ("_pad", ct.c_uint16),
        ("speed_bps", ct.c_uint64),
    ]


class SwitchCfg(ct.Structure):
    """value of `switches` (key: switch_id)"""
    _fields_ = [
        ("hash_seed", ct.c_uint32),
        ("hash_fields", ct.c_uint32),
        ("flags", ct.c_uint32),
        ("route_gen", ct.c_uint32),   # bumped after each route/avoid/address change
        ("arn_gen", ct.c_uint32),     # the data path's (notice exclusions); written 0 here
    ]


class RouteKey(ct.Structure):
    """key of `routes` (LPM): prefixlen = 32 + plen; switch_id_be and dst network order"""
    _fields_ = [
        ("prefixlen", ct.c_uint32),
        ("switch_id_be", ct.c_uint32),
        ("dst", ct.c_uint32),
    ]


class RouteVal(ct.Structure):
    """value of `routes`: prefix (network order) and plen repeat the key's, for notices"""
    _fields_ = [
        ("group_id", ct.c_uint32),
        ("flags", ct.c_uint32),
        ("avoid_mask", ct.c_uint64),
        ("prefix", ct.c_uint32),
        ("plen", ct.c_uint32),
    ]


class RouteCache(ct.Structure):
    """value of `route_cache` (PERCPU, key: slot); filled by the data path only"""
    _fields_ = [
        ("switch_id", ct.c_uint32),
        ("dst", ct.c_uint32),
        ("gen", ct.c_uint32),
        ("flags", ct.c_uint32),
        ("group_id", ct.c_uint32),
        ("arn_gen", ct.c_uint32),
        ("avoid_mask", ct.c_uint64),
        ("excl_until", ct.c_uint64),
    ]


class Group(ct.Structure):
    """value of `groups` (key: group_id)"""
    _fields_ = [
        ("mode", ct.c_uint16),
        ("n_members", ct.c_uint16),
        ("hash_fields", ct.c_uint32),
        ("member_base", ct.c_uint32),
        ("flowlet_ns", ct.c_uint32),
        ("busy_ns", ct.c_uint32),
        ("busy_util", ct.c_uint16),
        ("n_wslots", ct.c_uint16),
        ("wslots", ct.c_uint8 * WCMP_SLOTS),
        ("eslots", ct.c_uint32 * WCMP_SLOTS),
        ("rr", ct.c_uint64),
        ("down_mask", ct.c_uint64),
    ]


class Member(ct.Structure):
    """value of `members` (key: the group's member_base + i)"""
    _fields_ = [
        ("ifindex", ct.c_uint32),
        ("egress_slot", ct.c_uint32),
        ("dmac", ct.c_uint8 * 6),
        ("smac", ct.c_uint8 * 6),
        ("flags", ct.c_uint16),
        ("_pad", ct.c_uint16),
    ]


class PortAddrKey(ct.Structure):
    """key of `port_addrs` (value: c_uint32 flags)"""
    _fields_ = [
        ("ifindex", ct.c_uint32),
        ("ip", ct.c_uint32),
    ]


class LocalAddrKey(ct.Structure):
    """key of `local_addrs` (value: c_uint32 refcount)"""
    _fields_ = [
        ("switch_id", ct.c_uint32),
        ("ip", ct.c_uint32),
    ]


class PortStats(ct.Structure):
    """value of `port_stats` (PERCPU, key: port slot)"""
    _fields_ = [
        ("rx_packets", ct.c_uint64),
        ("rx_bytes", ct.c_uint64),
        ("tx_packets", ct.c_uint64),
        ("tx_bytes", ct.c_uint64),
        ("ecn_marked", ct.c_uint64),
        ("drops", ct.c_uint64 * DROP_REASON_MAX),
    ]


class PortQueue(ct.Structure):
    """value of `port_queue` (shared array, key: port slot); `lock` is struct bpf_spin_lock"""
    _fields_ = [
        ("lock", ct.c_uint32),
        ("ps_per_byte", ct.c_uint32),
        ("buf_ns", ct.c_uint64),
        ("ecn_ns", ct.c_uint64),
        ("win_ns", ct.c_uint32),
        ("util", ct.c_uint32),
        ("t_free", ct.c_uint64),
        ("win_start", ct.c_uint64),
        ("win_busy_ns", ct.c_uint64),
        ("flags", ct.c_uint32),
        ("_pad", ct.c_uint32),
        ("ecn_max_ns", ct.c_uint64),
        ("ecn_pmax", ct.c_uint32),
        ("_pad2", ct.c_uint32),
        ("placed", ct.c_uint64),
        ("placed_prev", ct.c_uint64),
    ]


class Handoff(ct.Structure):
    """What XDP writes after the Ethernet header of a frame it hands to tc_handoff (not a
    map value); tc_handoff removes it (HANDOFF_GAP bytes) before the qdisc"""
    _fields_ = [
        ("magic", ct.c_uint32),
        ("ifindex", ct.c_uint32),
        ("tc_class", ct.c_uint32),
        ("_pad", ct.c_uint32),
        ("key", ct.c_uint64),
    ]


_ETH_HLEN = 14


def handoff_in(frame: bytes) -> Handoff | None:
    """The handoff an XDP_PASS wrote into its frame (real-queue port), or None."""
    if len(frame) < _ETH_HLEN + HANDOFF_GAP:
        return None
    h = Handoff.from_buffer_copy(frame[_ETH_HLEN:_ETH_HLEN + HANDOFF_GAP])
    return h if h.magic == HANDOFF_MAGIC else None


def handed_on(frame: bytes) -> bytes:
    """A handed-off frame as tc_handoff sends it: without the handoff."""
    return frame[:_ETH_HLEN] + frame[_ETH_HLEN + HANDOFF_GAP:]


class FlowletKey(ct.Structure):
    _fields_ = [
        ("group_id", ct.c_uint32),
        ("hash", ct.c_uint32),
    ]


class Flowlet(ct.Structure):
    _fields_ = [
        ("last_ns", ct.c_uint64),
        ("member", ct.c_uint32),
        ("flowlets", ct.c_uint32),
    ]


class TmKey(ct.Structure):
    """key of `tm`: switch_id host order, addresses network order, ports host order"""
    _fields_ = [
        ("switch_id", ct.c_uint32),
        ("saddr", ct.c_uint32),
        ("daddr", ct.c_uint32),
        ("sport", ct.c_uint16),
        ("dport", ct.c_uint16),
        ("proto", ct.c_uint8),
        ("_pad", ct.c_uint8 * 3),
    ]


class TmDstKey(ct.Structure):
    """key of `tm_dsts` (value: c_uint32 entries): switch_id host order, daddr network order"""
    _fields_ = [
        ("switch_id", ct.c_uint32),
        ("daddr", ct.c_uint32),
    ]


class PktCount(ct.Structure):
    """value of `member_stats` and `verdict_stats` (PERCPU)"""
    _fields_ = [
        ("packets", ct.c_uint64),
        ("bytes", ct.c_uint64),
    ]


class TmEntry(ct.Structure):
    """value of `tm`"""
    _fields_ = [
        ("m", Member),
        ("packets", ct.c_uint64),
        ("bytes", ct.c_uint64),
    ]


class LearnKey(ct.Structure):
    """key of `arp_learned`: switch_id host order, ip network order"""
    _fields_ = [
        ("switch_id", ct.c_uint32),
        ("ip", ct.c_uint32),
    ]


class LearnVal(ct.Structure):
    """value of `arp_learned`"""
    _fields_ = [
        ("ifindex", ct.c_uint32),
        ("mac", ct.c_uint8 * 6),
        ("_pad", ct.c_uint16),
        ("last_ns", ct.c_uint64),
    ]


class FlowSeenKey(ct.Structure):
    """key of `flow_seen` (bpf/flows.h): egress slot host order, addresses network order,
    ports host order"""
    _fields_ = [
        ("slot", ct.c_uint32),
        ("saddr", ct.c_uint32),
        ("daddr", ct.c_uint32),
        ("sport", ct.c_uint16),
        ("dport", ct.c_uint16),
        ("proto", ct.c_uint8),
        ("_pad", ct.c_uint8 * 3),
    ]


class FlowSeen(ct.Structure):
    """value of `flow_seen`: estimated bytes and frames, first and last sampled ns"""
    _fields_ = [
        ("bytes", ct.c_uint64),
        ("packets", ct.c_uint64),
        ("first_ns", ct.c_uint64),
        ("last_ns", ct.c_uint64),
    ]


class FlowCfg(ct.Structure):
    """value of flow_cfg[0]"""
    _fields_ = [
        ("flags", ct.c_uint32),
        ("sample_mask", ct.c_uint32),
    ]


class PfcCfg(ct.Structure):
    """value of `pfc_cfg` (array, key 0)"""
    _fields_ = [
        ("flags", ct.c_uint32),
        ("lossless_dscp", ct.c_uint8),
        ("lossless_prio", ct.c_uint8),
        ("_pad", ct.c_uint16),
    ]


class PfcPort(ct.Structure):
    """value of `pfc_port` (array, key: ingress port slot)"""
    _fields_ = [
        ("limit_bytes", ct.c_uint32),
        ("head", ct.c_uint32),
        ("tail", ct.c_uint32),
        ("bytes", ct.c_uint32),
        ("peak", ct.c_uint32),
        ("_pad", ct.c_uint32),
        ("headroom_drops", ct.c_uint64),
        ("pause_rx", ct.c_uint64),
        ("pause_until", ct.c_uint64 * 8),
        ("ns_per_quantum", ct.c_uint64),
        ("t_dep", ct.c_uint64 * PFC_RING),
        ("len", ct.c_uint32 * PFC_RING),
    ]


class ArnCfg(ct.Structure):
    """value of `arn_cfg` (array, key 0)"""
    _fields_ = [
        ("flags", ct.c_uint32),
        ("hold_ms", ct.c_uint32),
        ("interval_ns", ct.c_uint64),
    ]


class ArnPort(ct.Structure):
    """value of `arn_ports` (array, key: port slot); addresses network order"""
    _fields_ = [
        ("flags", ct.c_uint32),
        ("src_ip", ct.c_uint32),
        ("dst_ip", ct.c_uint32),
        ("peer_switch", ct.c_uint32),
    ]


class ArnSwitch(ct.Structure):
    """value of `arn_switch` (array, key: switch id); written by the data path"""
    _fields_ = [
        ("excl", ct.c_uint32),
        ("_pad", ct.c_uint32),
        ("seq", ct.c_uint64),
    ]


class ArnStamps(ct.Structure):
    """value of `arn_stamps` (array, key: switch id): CLOCK_MONOTONIC ns of each reaction
    step's first occurrence since the agent cleared it (0: not yet); written by the data path"""
    _fields_ = [
        ("dead_ns", ct.c_uint64),
        ("notice_ns", ct.c_uint64),
        ("excl_ns", ct.c_uint64),
        ("avoid_ns", ct.c_uint64),
    ]


ARN_STAMP_FIELDS = tuple(name for name, _ in ArnStamps._fields_)


class LinkWatch(ct.Structure):
    """value of `link_watch` (per-CPU array, key 0): the link watch's rescan of one packet's
    group, between xdp_switch and xdp_link_scan (the data path's own scratch)"""
    _fields_ = [
        ("gid", ct.c_uint32),
        ("member", ct.c_uint32),
        ("down", ct.c_uint64),
        ("pending", ct.c_uint32),
        ("_pad", ct.c_uint32),
    ]


class ArnSentKey(ct.Structure):
    """key of `arn_sent` (LRU; value c_uint64 ns of the last notice)"""
    _fields_ = [
        ("switch_id", ct.c_uint32),
        ("prefix", ct.c_uint32),
        ("plen", ct.c_uint32),
        ("ifindex", ct.c_uint32),
    ]


class ArnExcl(ct.Structure):
    """value of `arn_excl` (LPM trie, key RouteKey of the notice's prefix)"""
    _fields_ = [
        ("group_id", ct.c_uint32),
        ("prefix", ct.c_uint32),
        ("plen", ct.c_uint32),
        ("_pad", ct.c_uint32),
        ("avoid", ct.c_uint64),
        ("until", ct.c_uint64),
    ]


# map name -> (key type, value type); sizes of array maps come from the cflags
MAPS: dict[str, tuple[type, type]] = {
    "ports": (ct.c_uint32, PortInfo),
    "port_index": (ct.c_uint32, PortInfo),
    "switches": (ct.c_uint32, SwitchCfg),
    "routes": (RouteKey, RouteVal),
    "route_cache": (ct.c_uint32, RouteCache),
    "groups": (ct.c_uint32, Group),
    "members": (ct.c_uint32, Member),
    "port_addrs": (PortAddrKey, ct.c_uint32),
    "local_addrs": (LocalAddrKey, ct.c_uint32),
    "port_stats": (ct.c_uint32, PortStats),
    "member_stats": (ct.c_uint32, PktCount),
    "verdict_stats": (ct.c_uint32, PktCount),
    "drop_stats": (ct.c_uint32, ct.c_uint64),
    "port_queue": (ct.c_uint32, PortQueue),
    "flowlets": (FlowletKey, Flowlet),
    "tm": (TmKey, TmEntry),
    "tm_dsts": (TmDstKey, ct.c_uint32),
    "arp_learned": (LearnKey, LearnVal),
    "learn_gen": (ct.c_uint32, ct.c_uint64),
    "handoff_key": (ct.c_uint32, ct.c_uint64),
    "flow_seen": (FlowSeenKey, FlowSeen),
    "flow_cfg": (ct.c_uint32, FlowCfg),
    "flow_sample": (ct.c_uint32, ct.c_uint64),
    "pfc_cfg": (ct.c_uint32, PfcCfg),
    "pfc_port": (ct.c_uint32, PfcPort),
    "arn_cfg": (ct.c_uint32, ArnCfg),
    "arn_ports": (ct.c_uint32, ArnPort),
    "arn_switch": (ct.c_uint32, ArnSwitch),
    "arn_sent": (ArnSentKey, ct.c_uint64),
    "arn_excl": (RouteKey, ArnExcl),
    "arn_stats": (ct.c_uint32, ct.c_uint64),
    "arn_stamps": (ct.c_uint32, ArnStamps),
    "arn_progs": (ct.c_uint32, ct.c_uint32),
    "link_watch": (ct.c_uint32, LinkWatch),
}

# C #define name -> value mirrored above (checked against railab_consts.h)
CONSTANTS: dict[str, int] = {
    name: value
    for name, value in dict(globals()).items()
    if name.isupper() and not name.startswith("_") and type(value) is int
}


def ip_be(ip: str | ipaddress.IPv4Address) -> int:
    """IPv4 address as the u32 whose in-memory bytes are network order (host-endian int)."""
    return int.from_bytes(socket.inet_aton(str(ip)), "little" if _LITTLE else "big")


def ip_str(be: int) -> str:
    """The inverse of ip_be: a u32 holding an address in network order -> dotted string."""
    return socket.inet_ntoa(be.to_bytes(4, "little" if _LITTLE else "big"))


def u32_be(value: int) -> int:
    """A host-order u32 stored so that its bytes in memory are big-endian."""
    return int.from_bytes(value.to_bytes(4, "big"), "little" if _LITTLE else "big")


def mac_bytes(mac: bytes | str) -> bytes:
    """'aa:bb:cc:dd:ee:ff' / 'aa-bb-..' / 'aabbccddeeff' / 6 bytes -> 6 bytes."""
    if isinstance(mac, (bytes, bytearray)):
        b = bytes(mac)
    else:
        b = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    if len(b) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    return b


def mac_str(mac: bytes | ct.Array) -> str:
    return ":".join(f"{x:02x}" for x in bytes(mac))

