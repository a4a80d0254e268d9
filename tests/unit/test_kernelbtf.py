"""dataplane.xdp.kernelbtf: struct member offsets from BTF, through anonymous unions and
structs, on a BTF blob built here and on the running kernel's."""
from __future__ import annotations

import struct

import pytest

from dataplane.xdp import kernelbtf
from dataplane.xdp.kernelbtf import Btf, BtfError

INT, STRUCT, UNION, PTR = 1, 4, 5, 2


def _blob() -> bytes:
    """struct sk_buff { u32 len; union { u32 mark; u32 reserved; }; struct { u64 a; u32 *dev; }; }
    with the union at byte 8 and the anonymous struct at byte 16."""
    names = b"\0u32\0sk_buff\0len\0mark\0reserved\0a\0dev\0"
    off = {n: names.index(n.encode() + b"\0") for n in ("u32", "sk_buff", "len", "mark", "reserved", "a", "dev")}
    types = b""
    types += struct.pack("<III", off["u32"], INT << 24, 4) + struct.pack("<I", 32)            # 1: u32
    types += struct.pack("<III", 0, UNION << 24 | 2, 4)                                      # 2: union
    types += struct.pack("<III", off["mark"], 1, 0) + struct.pack("<III", off["reserved"], 1, 0)
    types += struct.pack("<III", 0, PTR << 24, 1)                                             # 3: u32 *
    types += struct.pack("<III", 0, STRUCT << 24 | 2, 16)                                    # 4: struct
    types += struct.pack("<III", off["a"], 1, 0) + struct.pack("<III", off["dev"], 3, 64)
    types += struct.pack("<III", off["sk_buff"], STRUCT << 24 | 3, 32)                       # 5: sk_buff
    types += struct.pack("<III", off["len"], 1, 0) + struct.pack("<III", 0, 2, 64) + struct.pack("<III", 0, 4, 128)
    header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(names))
    return header + types + names


def test_members_are_found_inside_anonymous_unions_and_structs():
    btf = Btf(_blob())
    assert btf.member_offset("sk_buff", "len") == 0
    assert btf.member_offset("sk_buff", "mark") == 8
    assert btf.member_offset("sk_buff", "dev") == 24


def test_a_missing_struct_or_member_is_named():
    btf = Btf(_blob())
    with pytest.raises(BtfError, match="struct net_device is not"):
        btf.member_offset("net_device", "ifindex")
    with pytest.raises(BtfError, match="no member priority"):
        btf.member_offset("sk_buff", "priority")
    with pytest.raises(BtfError, match="not BTF"):
        Btf(b"\0" * 32)


@pytest.mark.skipif(not kernelbtf.VMLINUX_BTF.exists(), reason="this kernel has no /sys/kernel/btf/vmlinux")
def test_the_running_kernel_gives_every_offset_the_departure_programs_read():
    flags = dict(f[2:].split("=") for f in kernelbtf.departure_cflags())
    assert set(flags) == set(kernelbtf.FIELDS)
    offsets = {k: int(v) for k, v in flags.items()}
    # sk_buff starts with its list links and the device pointer sits within them or right after
    assert 0 < offsets["RL_SKB_DEV_OFF"] < offsets["RL_SKB_LEN_OFF"] < offsets["RL_SKB_MARK_OFF"] < 512
    assert offsets["RL_QSTATS_BACKLOG_OFF"] == 4          # struct gnet_stats_queue { qlen; backlog; ... }
