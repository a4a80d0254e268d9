"""Traffic patterns: which NIC sends to which (the workload's ``pattern``; the list of
patterns is in dataplane.traffic.workload's doc)."""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from dataplane.errors import WorkloadError


@dataclass(frozen=True)
class Nic:
    ifname: str
    ip: str
    rail: int
    mac: str | None = None


@dataclass(frozen=True)
class Host:
    name: str
    nics: tuple[Nic, ...]

    def nic(self, key: str | int) -> Nic:
        for n in self.nics:
            if n.ifname == key or (isinstance(key, int) and n.rail == key):
                return n
        raise KeyError(key)

    def nic_on_rail(self, rail: int) -> Nic | None:
        for n in self.nics:
            if n.rail == rail:
                return n
        return None


@dataclass(frozen=True)
class Pair:
    src_host: Host
    src_nic: Nic
    dst_host: Host
    dst_nic: Nic
    spec: dict[str, Any] | None = None   # explicit flow entry


PERMUTATION_DRAWS = 1000


def _permutation(rng: random.Random, nics: list[tuple[Host, Nic]], source: str) -> list[Pair]:
    """A uniformly drawn permutation of the NICs (grouped by host, as listed) in which no
    NIC sends to its own host: rejection sampling, and past PERMUTATION_DRAWS the shift by
    the largest host's NIC count, which leaves every host's group when no host holds
    more than half of the NICs (if one does, no such permutation exists)."""
    n = len(nics)
    per_host = max(Counter(id(h) for h, _ in nics).values(), default=0)
    if 2 * per_host > n:
        raise WorkloadError(f"{source}: pattern.type: 'permutation' needs every host to hold "
                            f"at most half of the NICs it draws from (one holds {per_host} of {n})")
    for _ in range(PERMUTATION_DRAWS):
        order = rng.sample(range(n), n)
        if all(nics[i][0] is not nics[j][0] for i, j in enumerate(order)):
            break
    else:
        order = [(i + per_host) % n for i in range(n)]
    return [Pair(nics[i][0], nics[i][1], nics[j][0], nics[j][1]) for i, j in enumerate(order)]


def _rails(hosts: Sequence[Host]) -> list[int]:
    return sorted({n.rail for h in hosts for n in h.nics})


def pairs(wl: Any, hosts: Sequence[Host]) -> list[Pair]:
    """Who sends to whom under `wl` (a workload.Workload: its pattern, seed, source)."""
    pat = wl.pattern
    kind = pat["type"]
    byname = {h.name: h for h in hosts}
    if kind != "flows" and len(hosts) < 2:
        raise WorkloadError(f"{wl.source}: pattern.type: '{kind}' needs at least 2 hosts, "
                            f"got {len(hosts)}")
    rails = pat.get("rails", "all")
    sel = _rails(hosts) if rails in ("all", "same") else list(rails)
    found: list[Pair] = []
    if kind == "ring-allreduce":
        all_rails = _rails(hosts)
        for r in sel:
            members = [(h, h.nic_on_rail(r)) for h in hosts if h.nic_on_rail(r)]
            if len(members) < 2:
                continue
            n = len(members)
            for i, (h, nic) in enumerate(members):
                dh, dn = members[(i + 1) % n]
                if pat.get("shift"):    # across rails: to the next host's NIC on rail r + shift
                    dn = dh.nic_on_rail(all_rails[(all_rails.index(r) + int(pat["shift"])) % len(all_rails)]) or dn
                found.append(Pair(h, nic, dh, dn))
                if pat.get("bidirectional") and n > 2:
                    ph, pn = members[(i - 1) % n]
                    found.append(Pair(h, nic, ph, pn))
    elif kind == "all-to-all":
        for h in hosts:
            for nic in h.nics:
                if nic.rail not in sel:
                    continue
                for d in hosts:
                    if d is h:
                        continue
                    for dn in d.nics:
                        if dn.rail not in sel:
                            continue
                        if rails == "same" and dn.rail != nic.rail:
                            continue
                        src = nic
                        if pat.get("pxn") and dn.rail != nic.rail:
                            src = h.nic_on_rail(dn.rail) or nic
                        found.append(Pair(h, src, d, dn))
    elif kind == "cross-rail":
        shift = int(pat.get("shift", 1))
        all_rails = _rails(hosts)
        if len(all_rails) < 2:
            raise WorkloadError(f"{wl.source}: pattern.type: 'cross-rail' needs hosts "
                                f"with at least 2 rails")
        for i, h in enumerate(hosts):
            d = hosts[(i + 1) % len(hosts)]
            for nic in h.nics:
                if nic.rail not in sel:
                    continue
                dr = all_rails[(all_rails.index(nic.rail) + shift) % len(all_rails)]
                dn = d.nic_on_rail(dr)
                if dn is None:
                    continue
                src = (h.nic_on_rail(dr) or nic) if pat.get("pxn") else nic
                found.append(Pair(h, src, d, dn))
    elif kind == "permutation":
        found = _permutation(random.Random(f"{wl.seed}/permutation"),
                             [(h, nic) for h in hosts for nic in h.nics if nic.rail in sel], wl.source)
    else:  # flows
        for i, f in enumerate(pat["flows"]):
            ends = []
            for k in ("src", "dst"):
                hn, nk = f[k].split(":", 1)
                h = byname.get(hn)
                if h is None:
                    raise WorkloadError(f"{wl.source}: pattern.flows[{i}].{k}: unknown "
                                        f"host {hn!r}")
                try:
                    nic = h.nic(int(nk) if nk.isdigit() else nk)
                except KeyError:
                    raise WorkloadError(f"{wl.source}: pattern.flows[{i}].{k}: host "
                                        f"{hn!r} has no NIC {nk!r}") from None
                ends.append((h, nic))
            found.append(Pair(ends[0][0], ends[0][1], ends[1][0], ends[1][1], f))
    return found
