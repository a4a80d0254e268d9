"""The traffic matrix: `tm` (a 5-tuple of one switch pinned to an egress port, whatever
its route says) and `tm_dsts` (which destinations have entries, so the data path looks
`tm` up only for them). The switch's SW_F_TM flag is on while it has entries.

Owns SwitchDataplane._tm and _tm_dsts."""
from __future__ import annotations

import ctypes as ct

from dataplane.xdp import abi
from dataplane.xdp.bpfio import DataplaneError
from dataplane.xdp.tables.routes import ip4

IPPROTO = {"udp": 17, "tcp": 6, "icmp": 1}


class TrafficMatrixTables:
    """Static and dynamic traffic-matrix entries.

    A part of SwitchDataplane (dataplane.xdp.switch): it uses the class's maps,
    shadow state and range checks."""

    @staticmethod
    def _tm_key(switch_id: int, src: str, dst: str, sport: int, dport: int, proto) -> abi.TmKey:
        p = IPPROTO.get(proto, proto) if isinstance(proto, str) else proto
        if not isinstance(p, int) or not 0 <= p < 256:
            raise ValueError(f"bad protocol {proto!r}")
        return abi.TmKey(switch_id=switch_id, saddr=abi.ip_be(ip4(src)), daddr=abi.ip_be(ip4(dst)),
                         sport=sport, dport=dport, proto=p)

    def tm_add(self, switch_id: int, *, src: str, dst: str, sport: int, dport: int, proto="udp",
               egress_ifindex: int, dmac: str) -> None:
        """Static traffic-matrix entry: this 5-tuple on this switch leaves by egress_ifindex
        (next-hop dmac), whatever the route's group and mode say. sport/dport 0 match
        packets without ports (ICMP, fragments)."""
        self._check_switch(switch_id)
        port = self.port_info(egress_ifindex)
        if port.switch_id != switch_id:
            raise DataplaneError(f"ifindex {egress_ifindex} is not a port of switch {switch_id}")
        key = self._tm_key(switch_id, src, dst, sport, dport, proto)
        e = abi.TmEntry()
        e.m.ifindex = egress_ifindex
        e.m.egress_slot = port.slot
        e.m.dmac[:] = list(abi.mac_bytes(dmac))
        e.m.smac[:] = list(port.mac)
        self.maps.update("tm", key, e)
        ident = (switch_id, src, dst, int(sport), int(dport), key.proto)
        self._tm[ident] = {"switch_id": switch_id, "src": src, "dst": dst, "sport": int(sport),
                           "dport": int(dport), "proto": key.proto, "egress_ifindex": egress_ifindex}
        refs = self._tm_dsts.setdefault((switch_id, key.daddr), set())
        refs.add(ident)
        self.maps.update("tm_dsts", abi.TmDstKey(switch_id=switch_id, daddr=key.daddr), ct.c_uint32(len(refs)))
        self._set_switch_flag(switch_id, abi.SW_F_TM, True)   # also invalidates route_cache

    def tm_del(self, switch_id: int, *, src: str, dst: str, sport: int, dport: int, proto="udp") -> bool:
        key = self._tm_key(switch_id, src, dst, sport, dport, proto)
        found = self.maps.delete("tm", key)
        ident = (switch_id, src, dst, int(sport), int(dport), key.proto)
        self._tm.pop(ident, None)
        refs = self._tm_dsts.get((switch_id, key.daddr))
        if refs is not None:
            refs.discard(ident)
            dkey = abi.TmDstKey(switch_id=switch_id, daddr=key.daddr)
            if refs:
                self.maps.update("tm_dsts", dkey, ct.c_uint32(len(refs)))
            else:
                del self._tm_dsts[(switch_id, key.daddr)]
                self.maps.delete("tm_dsts", dkey)
        # both invalidate route_cache (RC_F_TM)
        if not any(k[0] == switch_id for k in self._tm):
            self._set_switch_flag(switch_id, abi.SW_F_TM, False)
        else:
            self._routes_changed(switch_id)
        return found

    def tm_list(self, switch_id: int | None = None) -> list[dict]:
        """Entries with their match counters (packets, bytes)."""
        out = []
        for (sw, src, dst, sport, dport, proto), info in self._tm.items():
            if switch_id is not None and sw != switch_id:
                continue
            e = abi.TmEntry()
            self.maps.lookup("tm", self._tm_key(sw, src, dst, sport, dport, proto), e)
            out.append({**info, "packets": e.packets, "bytes": e.bytes})
        return out
