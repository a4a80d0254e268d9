"""Offsets of kernel struct members, read from the running kernel's BTF.

The departure programs (bpf/switch.c rl_departed) read a few fields of the sk_buff
the kernel is sending and of its device's root qdisc. bcc would take the layout from the kernel headers it finds, and
those need not match the running kernel (a kernel built with another config: on this
machine the program read garbage for skb->mark and dev->ifindex). /sys/kernel/btf/vmlinux describes the kernel
that runs, so the offsets come from there and reach the program as -D flags.

Only what is needed is parsed: the type records are walked once to index them, and the
two structs' members (through anonymous unions and structs) are looked up by name.
"""
from __future__ import annotations

import functools
import struct
from pathlib import Path

VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
BTF_MAGIC = 0xEB9F
KIND_STRUCT, KIND_UNION = 4, 5
# bytes after the 12-byte common header, per kind: fixed, and per vlen entry
_TRAILER = {1: (4, 0), 3: (12, 0), 4: (0, 12), 5: (0, 12), 6: (0, 8), 13: (0, 8), 14: (4, 0),
            15: (0, 12), 17: (4, 0), 19: (0, 12)}
# -D name -> (struct, member): what rl_departed reads
FIELDS = {"RL_SKB_MARK_OFF": ("sk_buff", "mark"), "RL_SKB_LEN_OFF": ("sk_buff", "len"),
          "RL_SKB_DEV_OFF": ("sk_buff", "dev"), "RL_NETDEV_IFINDEX_OFF": ("net_device", "ifindex"),
          "RL_NETDEV_QDISC_OFF": ("net_device", "qdisc"), "RL_QDISC_QSTATS_OFF": ("Qdisc", "qstats"),
          "RL_QSTATS_BACKLOG_OFF": ("gnet_stats_queue", "backlog")}


class BtfError(RuntimeError):
    pass


class Btf:
    def __init__(self, blob: bytes):
        magic, _version, _flags, hdr_len = struct.unpack_from("<HBBI", blob, 0)
        if magic != BTF_MAGIC:
            raise BtfError("not BTF (or not little-endian)")
        type_off, type_len, str_off, _str_len = struct.unpack_from("<IIII", blob, 8)
        self.blob = blob
        self.strings = hdr_len + str_off
        self.types = [0]                   # type id -> offset of its record; id 0 is void
        self.structs: dict[str, int] = {}  # name -> type id of a named struct
        pos, end = hdr_len + type_off, hdr_len + type_off + type_len
        while pos < end:
            name_off, info = struct.unpack_from("<II", blob, pos)
            kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
            self.types.append(pos)
            if kind == KIND_STRUCT and name_off:
                self.structs.setdefault(self._name(name_off), len(self.types) - 1)
            fixed, each = _TRAILER.get(kind, (0, 0))
            pos += 12 + fixed + each * vlen

    def _name(self, off: int) -> str:
        start = self.strings + off
        return self.blob[start:self.blob.index(b"\0", start)].decode()

    def _members(self, type_id: int):
        pos = self.types[type_id]
        _, info, _ = struct.unpack_from("<III", self.blob, pos)
        bitfields = bool(info >> 31)
        for i in range(info & 0xFFFF):
            name_off, member_type, offset = struct.unpack_from("<III", self.blob, pos + 12 + 12 * i)
            yield name_off, member_type, (offset & 0xFFFFFF) if bitfields else offset

    def _kind(self, type_id: int) -> int:
        return (struct.unpack_from("<I", self.blob, self.types[type_id] + 4)[0] >> 24) & 0x1F

    def member_offset(self, struct_name: str, member: str) -> int:
        """Byte offset of `member` in `struct struct_name`, looking inside anonymous
        unions and structs."""
        if struct_name not in self.structs:
            raise BtfError(f"struct {struct_name} is not in the kernel's BTF")
        found = self._find(self.structs[struct_name], member, 0)
        if found is None:
            raise BtfError(f"struct {struct_name} has no member {member}")
        return found // 8

    def _find(self, type_id: int, member: str, base_bits: int) -> int | None:
        for name_off, member_type, offset in self._members(type_id):
            if name_off and self._name(name_off) == member:
                return base_bits + offset
            if not name_off and self._kind(member_type) in (KIND_STRUCT, KIND_UNION):
                found = self._find(member_type, member, base_bits + offset)
                if found is not None:
                    return found
        return None


@functools.lru_cache(maxsize=1)
def departure_cflags() -> tuple[str, ...]:
    """-D flags with the offsets rl_departed reads, for the running kernel."""
    try:
        btf = Btf(VMLINUX_BTF.read_bytes())
    except OSError as e:
        raise BtfError(f"{VMLINUX_BTF}: {e.strerror}") from None
    return tuple(f"-D{flag}={btf.member_offset(*where)}" for flag, where in FIELDS.items())
