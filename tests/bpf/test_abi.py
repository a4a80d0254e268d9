"""dataplane.xdp.abi's ctypes mirrors must match the C (as bcc sees it) byte for byte."""

from __future__ import annotations

import ctypes as ct
import re

import pytest

from dataplane.xdp import abi, bpfcache
from dataplane.xdp.switch import BPF_DIR, SWITCH_C


@pytest.fixture(scope="module")
def bcc_view(dp):
    """The C types as bcc compiles them with the data plane's own flags. The data plane
    itself may have been loaded from railab's cache, which keeps fds, not bcc's types."""
    from bcc import BPF   # deferred on purpose: bcc is only on root/test machines
    b = BPF(src_file=str(SWITCH_C).encode(), cflags=dp.cflags)
    try:
        yield b
    finally:
        b.cleanup()


def _max_entries(fd: int) -> int:
    info = bpfcache._MapInfo()
    bpfcache._info(fd, info)
    return info.max_entries


def _layout(t) -> list[tuple[str, int, int]]:
    """(name, offset, size) of every non-padding field, nested structs flattened."""
    if not (isinstance(t, type) and issubclass(t, ct.Structure)):
        return []
    out = []
    for f in t._fields_:
        name = f[0]
        if name.startswith("__pad"):
            continue
        d = getattr(t, name)
        out.append((name, d.offset, d.size))
    return out


@pytest.mark.parametrize("name", sorted(abi.MAPS))
def test_map_types_match_c(bcc_view, name):
    table = bcc_view[name.encode()]
    bcc_key = table.Key
    bcc_leaf = getattr(table, "sLeaf", table.Leaf)   # PERCPU tables keep the per-CPU leaf in sLeaf
    key, leaf = abi.MAPS[name]
    assert ct.sizeof(key) == ct.sizeof(bcc_key), f"{name} key size"
    assert ct.sizeof(leaf) == ct.sizeof(bcc_leaf), f"{name} value size"
    for mine, theirs in ((key, bcc_key), (leaf, bcc_leaf)):
        lt = _layout(theirs)
        lm = _layout(mine)
        # bcc names fields as in C; our mirrors may have extra explicit _pad fields
        assert [x for x in lm if not x[0].startswith("_pad")] == [x for x in lt if not x[0].startswith("_pad")], name


def test_percpu_values_are_8_byte_multiples():
    for name in ("port_stats", "member_stats", "verdict_stats", "drop_stats"):
        assert ct.sizeof(abi.MAPS[name][1]) % 8 == 0, name


def test_constants_match_c_defines():
    defines = {}
    for header in ("railab_consts.h", "flows.h"):
        text = (BPF_DIR / header).read_text()
        for m in re.finditer(r"^#define\s+(\w+)\s+(.+?)\s*(?:/\*.*)?$", text, re.M):
            name, expr = m.group(1), m.group(2).strip()
            expr = re.sub(r"([0-9a-fA-F])U?L{0,2}\b", r"\1", expr)   # 1ULL << 63 -> 1 << 63
            if re.fullmatch(r"[0-9xXa-fA-F()<> ]+", expr):
                defines[name] = eval(expr)               # noqa: S307 -- literal arithmetic only
    mirrored = {k: v for k, v in abi.CONSTANTS.items()}
    missing = sorted(set(mirrored) - set(defines))
    assert not missing, f"abi constants without a C #define: {missing}"
    unmirrored = sorted(set(defines) - set(mirrored) - {"RL_ARPHRD_ETHER", "RL_ARPOP_REQUEST",
                                                          "RL_ARPOP_REPLY", "RL_IP_MF", "RL_IP_OFFSET"})
    assert not unmirrored, f"C #defines not mirrored in dataplane.xdp.abi: {unmirrored}"
    for k, v in mirrored.items():
        assert defines[k] == v, k


def test_compiled_sizes_follow_cflags(dp, bcc_view):
    assert f"-DMAX_PORTS={dp.max_ports}" in dp.cflags
    expected = {"members": dp.max_member_entries, "member_stats": dp.max_member_entries,
                "port_stats": dp.max_ports, "pfc_port": dp.max_ports,
                "routes": dp.max_routes}
    for name, entries in expected.items():
        assert bcc_view[name.encode()].max_entries == entries, name
        # the object the data plane runs (compiled, or loaded from the cache) agrees
        assert _max_entries(dp._object.maps[name]) == entries, name
