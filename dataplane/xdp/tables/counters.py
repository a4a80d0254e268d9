"""Counters: per port (`port_stats`: packets, bytes, ECN marks, drops by reason), per
group member (`member_stats`), per XDP verdict and per drop reason lab-wide
(`verdict_stats`, `drop_stats`), read one port at a time or many in one batch lookup."""
from __future__ import annotations

import ctypes as ct
import time
from array import array

from dataplane.xdp import abi
from dataplane.xdp.bpfio import DataplaneError


class CounterTables:
    """Port, member, verdict and drop counters.

    A part of SwitchDataplane (dataplane.xdp.switch): it uses the class's maps,
    shadow state and range checks."""

    _PORT_STATS_WORDS = ct.sizeof(abi.PortStats) // 8
    _PORT_TOTALS = ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "ecn_marked")   # its first words
    _DROPS_AT = abi.PortStats.drops.offset // 8

    def port_counters(self, ifindex: int) -> dict:
        """rx_packets, rx_bytes, tx_packets, tx_bytes, ecn_marked, drops: {reason: n}
        (summed over CPUs)."""
        return self._counters_of(self._port_stats_words(ifindex))

    def _counters_of(self, words: list[int]) -> dict:
        out = dict(zip(self._PORT_TOTALS, words))
        out["drops"] = {name: words[self._DROPS_AT + r] for r, name in abi.DROP_REASONS.items()}
        return out

    def ports_counters(self, ifindexes) -> dict[int, dict]:
        """port_counters and port_queue_state of many ports in one dict each, read with two
        batch lookups (the agent's counters reply covers every port of a lab; one lookup
        a port cost a 56-node lab ~80 ms)."""
        slots, stats, queues = self._read_port_tables(ifindexes)
        if not slots:
            return {}
        n, ncpus = self._PORT_STATS_WORDS, self.maps.ncpus
        now = time.monotonic_ns()
        out = {}
        for ifx, slot in slots.items():
            flat = stats[slot * n * ncpus:(slot + 1) * n * ncpus]
            out[ifx] = {**self._counters_of([sum(flat[w::n]) for w in range(n)]),
                        **self._queue_state_of(queues[slot], now)}
        return out

    def _read_port_tables(self, ifindexes) -> tuple[dict[int, int], array | None, list | None]:
        """(ifindex -> slot, every port_stats entry up to the highest slot as u64 words in
        slot, CPU, word order, the port_queue entries): two batch lookups for many ports."""
        slots = {ifx: self.port_info(ifx).slot for ifx in ifindexes}
        if not slots:
            return slots, None, None
        count = max(slots.values()) + 1
        n, ncpus = self._PORT_STATS_WORDS, self.maps.ncpus
        stats = array("Q", bytes(self.maps.array_values("port_stats", count, ct.c_uint64 * (n * ncpus))))
        return slots, stats, self.maps.array_values("port_queue", count, abi.PortQueue)

    def _port_stats_words(self, ifindex: int) -> list[int]:
        """A port's port_stats entry as u64 words, summed over CPUs: one lookup, read as
        a flat array (a live view polls every port twice a second; ctypes field access
        per CPU and per reason cost the agent ~20 us a port)."""
        port = self.port_info(ifindex)
        n = self._PORT_STATS_WORDS
        buf = (ct.c_uint64 * (n * self.maps.ncpus))()
        if not self.maps.lookup("port_stats", ct.c_uint32(port.slot), buf):
            raise DataplaneError(f"BPF map port_stats: no entry {port.slot}")
        flat = buf[:]
        return [sum(flat[w::n]) for w in range(n)]

    def port_loads(self, ifindexes) -> dict[int, tuple[int, int, int, int, int]]:
        """Per port (tx_bytes, rx_bytes, ecn_marked, drops of every reason summed, virtual
        backlog bytes now): port_counters' and port_queue_state's numbers for many ports,
        read with two batch lookups instead of two lookups a port (a live view asks for
        every port of a lab twice a second)."""
        slots, words, queues = self._read_port_tables(ifindexes)
        if not slots:
            return {}
        n, ncpus = self._PORT_STATS_WORDS, self.maps.ncpus
        stride = n * ncpus

        def column(word: int) -> list[int]:          # one word of every slot, summed over CPUs
            cols = [words[cpu * n + word::stride] for cpu in range(ncpus)]
            return list(map(sum, zip(*cols))) if ncpus > 1 else list(cols[0])
        tx, rx, ecn = (column(getattr(abi.PortStats, f).offset // 8) for f in ("tx_bytes", "rx_bytes", "ecn_marked"))
        drops = list(map(sum, zip(*(column(self._DROPS_AT + r) for r in abi.DROP_REASONS))))
        now = time.monotonic_ns()
        out = {}
        for ifx, slot in slots.items():
            q = queues[slot]
            backlog = max(q.t_free - now, 0) * 1000 // q.ps_per_byte if q.ps_per_byte else 0
            out[ifx] = (tx[slot], rx[slot], ecn[slot], drops[slot], backlog)
        return out

    def member_counters(self, group_id: int) -> list[dict]:
        """Per current member: ifindex, packets, bytes."""
        self._check_group(group_id)
        g = self._groups.get(group_id)
        members = g.members if g else []
        out = []
        base = self._member_ranges.base(group_id)
        for i, (ifindex, _) in enumerate(members):
            per_cpu = self.maps.percpu("member_stats", base + i, abi.PktCount)
            out.append({"ifindex": ifindex, "packets": sum(c.packets for c in per_cpu),
                        "bytes": sum(c.bytes for c in per_cpu)})
        return out

    def groups_member_counters(self, group_ids) -> dict[int, list[dict]]:
        """member_counters of many groups, read in one batch lookup of member_stats."""
        gids = [gid for gid in group_ids if self._groups.get(gid)]
        if not gids:
            return {gid: [] for gid in group_ids}
        ncpus = self.maps.ncpus
        bases = {gid: self._member_ranges.base(gid) for gid in gids}
        end = max(bases[gid] + len(self._groups[gid].members) for gid in gids)
        stats = self.maps.array_values("member_stats", end, abi.PktCount * ncpus)
        out: dict[int, list[dict]] = {gid: [] for gid in group_ids}
        for gid in gids:
            for i, (ifindex, _) in enumerate(self._groups[gid].members):
                per_cpu = stats[bases[gid] + i]
                out[gid].append({"ifindex": ifindex, "packets": sum(c.packets for c in per_cpu),
                                 "bytes": sum(c.bytes for c in per_cpu)})
        return out

    def verdict_counters(self) -> dict:
        """{verdict: {packets, bytes}} for aborted, drop, pass, tx, redirect (all switches)."""
        out = {}
        for action, name in abi.XDP_ACTIONS.items():
            per_cpu = self.maps.percpu("verdict_stats", action, abi.PktCount)
            out[name] = {"packets": sum(c.packets for c in per_cpu), "bytes": sum(c.bytes for c in per_cpu)}
        return out

    def drop_counters(self) -> dict:
        """{reason: packets} over all ports (includes unknown_port, counted only here)."""
        return {name: sum(self.maps.percpu("drop_stats", r, ct.c_uint64))
                for r, name in abi.DROP_REASONS.items()}
