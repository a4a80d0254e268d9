"""Flow visibility: `flow_cfg` (on/off, sampling) and `flow_seen`, the per (egress port,
5-tuple) byte counts the agent's flow views and the nav controller read."""
from __future__ import annotations

import ctypes as ct

from dataplane.xdp import abi


class FlowTables:
    """Per-flow accounting in flow_seen.

    A part of SwitchDataplane (dataplane.xdp.switch): it uses the class's maps,
    shadow state and range checks."""

    def set_flow_visibility(self, on: bool, sample_shift: int = 0) -> None:
        """Account frames per (egress port, 5-tuple) in flow_seen (bpf/flows.h): every
        frame (sample_shift 0) or one in 2^sample_shift, credited 2^sample_shift times."""
        if not 0 <= sample_shift <= 16:
            raise ValueError("sample_shift must be 0..16 (one frame in 1 .. 65536)")
        cfg = abi.FlowCfg(flags=abi.FLOW_CFG_F_ON if on else 0, sample_mask=(1 << sample_shift) - 1)
        self.maps.update("flow_cfg", ct.c_uint32(0), cfg)

    def flow_visibility(self) -> dict:
        cfg = abi.FlowCfg()
        self.maps.lookup("flow_cfg", ct.c_uint32(0), cfg)
        return {"on": bool(cfg.flags & abi.FLOW_CFG_F_ON),
                "sample_shift": (cfg.sample_mask + 1).bit_length() - 1}

    def flows_seen(self) -> list[dict]:
        """Every flow_seen entry: egress slot, 5-tuple (addresses as dotted strings, proto
        number), estimated bytes and frames, first and last sampled ns (CLOCK_MONOTONIC)."""
        out = []
        for k, v in self.maps.items("flow_seen"):
            out.append({"slot": k.slot, "src": abi.ip_str(k.saddr), "dst": abi.ip_str(k.daddr),
                        "sport": k.sport, "dport": k.dport, "proto": k.proto,
                        "bytes": v.bytes, "packets": v.packets,
                        "first_ns": v.first_ns, "last_ns": v.last_ns})
        return out

    def forget_flows_seen(self, older_than_ns: int) -> int:
        """Delete entries whose last frame is before older_than_ns; returns how many."""
        stale = [k for k, v in self.maps.items("flow_seen") if v.last_ns < older_than_ns]
        for k in stale:
            self.maps.delete("flow_seen", k)
        return len(stale)
