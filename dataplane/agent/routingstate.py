"""The lab's routing state as the agent programmed it, shared by the programmer's parts
(dataplane.agent.programmer) and read by the fabric monitor through its methods."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RoutingState:
    """The lab's routing state as programmed: one next-hop group per (switch, member
    interfaces), the prefixes routed over each group, and the learned /32 host routes.
    `generation` changes whenever groups or their prefixes do, so a reader can tell
    that what it derived from them is stale."""

    groups: dict[tuple[str, tuple[str, ...]], int] = field(default_factory=dict)
    members: dict[int, list[str]] = field(default_factory=dict)
    prefixes: dict[int, list[str]] = field(default_factory=dict)
    host_routes: dict[tuple[str, str], int] = field(default_factory=dict)
    host_switches: dict[str, set[str]] = field(default_factory=dict)   # /32 -> switches holding it
    generation: int = 0

    def members_of(self, gid: int) -> list[str]:
        """The member interfaces of group gid ([] for a group that does not exist)."""
        return self.members.get(gid, [])

    def every_group(self) -> list[tuple[str, int, tuple[str, ...]]]:
        """(switch, group id, member interfaces) of every group of the lab."""
        return [(owner, gid, members) for (owner, members), gid in self.groups.items()]

    def group_ids(self, switch: str) -> list[int]:
        return [gid for (owner, _), gid in self.groups.items() if owner == switch]

    def switch_groups(self, switch: str) -> list[tuple[int, tuple[str, ...]]]:
        """(group id, member interfaces) of every group of `switch`."""
        return [(gid, members) for (owner, members), gid in self.groups.items() if owner == switch]

    def group_prefixes(self, switch: str, gids=None) -> list[tuple[int, str]]:
        """(group id, prefix) for the given groups of `switch` (all of its groups when
        gids is None); a group of another switch is not `switch`'s and is left out."""
        own = self.group_ids(switch)
        wanted = own if gids is None else [g for g in gids if g in own]
        return [(gid, prefix) for gid in wanted for prefix in self.prefixes.get(gid, [])]

    def add_prefix(self, gid: int, prefix: str) -> None:
        self.prefixes[gid].append(prefix)
        self.generation += 1
