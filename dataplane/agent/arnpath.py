"""Who makes and consumes the link-down notices: the monitor's setting `arn_path`.

agent      (default) the fabric monitor (dataplane/agent/monitor.py) sends FGLB link-down
           notices from netlink events through each switch's kernel stack, and the
           receiving agent writes the route avoid masks.
dataplane  the switches' XDP programs do it (bpf/switch.c xdp_notice_tx / xdp_notice_rx,
           issue 27): a packet that meets a group with no live member becomes a notice back
           to the switch that sent it, rate-limited per (prefix, port); the upstream's program
           records the exclusion until a RESTORE and drops the notice. The monitor then
           sends no link-down WITHDRAW, only the RESTORE once the prefix is reachable again; congestion notices (`arn`) stay the agent's, and the data
           plane consumes those too (prefix granularity; flow lists go on to the agent).

arn_capture (dataplane only): a consumed notice is passed up the receiving switch's stack
instead of dropped, so that tcpdump on that port sees it (XDP_TX frames pass no capture
point on their way out, and a dropped one none on the way in); the monitor's socket then
receives it and leaves it alone (consumed_below).

With dataplane, the switches also watch their fabric links themselves (bpf/switch.c
rl_link_up): a link the kernel has taken down is left at once, as an ASIC's fast failover
would, without waiting for the agent's netlink; a packet whose group that leaves empty is
the one that becomes the notice.

program() writes the data plane's side of the setting: on/off, the hold a notice carries
(0: until RESTORE), the rate limit (the monitor's real-fabric interval_ms as wall-clock
time at the lab's scale), and which ports are switch-switch links with the notice's
addresses on them."""
from __future__ import annotations

PATHS = ("agent", "dataplane")


def configure(monitor, new: dict) -> None:
    """The monitor's settings are about to become `new`: refuse an unknown arn_path; program
    the data plane if it makes or made the notices (under the monitor's lock)."""
    if new["arn_path"] not in PATHS:
        raise ValueError(f"arn_path {new['arn_path']!r}: must be one of {', '.join(PATHS)}")
    if "dataplane" in (new["arn_path"], monitor.cfg["arn_path"]):
        with monitor.lock:
            program(monitor.spec, monitor.dp, new, monitor.p.wall_us)


def program(spec, dp, cfg: dict, wall_us) -> None:
    """Program the data plane for cfg (the monitor's settings); wall_us: real-fabric us ->
    wall-clock us at the lab's scale (SwitchProgrammer.wall_us). Call under the agent's lock."""
    on = cfg["arn_path"] == "dataplane"
    # A link-down WITHDRAW holds until the agent's RESTORE (the failover part sends it when
    # the prefix is reachable again): a hold that expired while the link is still down
    # would cost a packet per flow at every expiry. The rate limit (one notice per route
    # and port) is the congestion notices' interval, at least 1 ms of wall time.
    interval_ns = max(1_000_000, round(wall_us(cfg["interval_ms"] * 1000) * 1000))
    dp.set_notices(generate=on and cfg["notify"], consume=on, hold_ms=0, interval_ns=interval_ns,
                   pass_consumed=on and cfg["arn_capture"], watch=on)
    if not on:      # nothing will RESTORE what the data plane still excludes
        dp.clear_exclusions()
    for node in spec.switches:
        for iface in node.interfaces:
            peer = spec.find_node(iface.peer_node)
            fabric = on and peer is not None and peer.role != "host"
            far = peer.interface(iface.peer_if) if fabric else None
            dp.set_notice_port(iface.ifindex, fabric=fabric, src=iface.address or None,
                               dst=(far.address or None) if far is not None else None,
                               peer_switch=peer.switch_id if fabric and peer.switch_id else 0)


def consumed_below(cfg: dict, data: bytes) -> bool:
    """A notice the monitor's socket received that the data plane has consumed already
    (arn_path dataplane: every notice but a flow list, which the data plane leaves to the
    agent): the agent must not act on it a second time."""
    return cfg["arn_path"] == "dataplane" and not (len(data) > 7 and data[:4] == b"RARN" and data[7] & 0x1)
