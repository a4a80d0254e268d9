"""Send a frame out of a veth as an XDP frame instead of through the kernel stack.

A native-XDP veth turns every skb it receives from its peer's stack into an xdp_buff, and
since kernel 6.6 it takes that buffer from a page pool of its own whose first allocation
refills 64 pages at once (256 KiB) that the pool keeps until XDP is detached. Every
switch port that ever received a frame from a host's kernel stack held 256 KiB: at deploy
each host port's gratuitous ARP did it to every host-facing leaf port (2 GiB of a 4,096-GPU
lab's 4.5 GiB). A frame a program redirects arrives as an xdp_frame and needs no copy.

inject() runs a four-instruction XDP program (redirect to ctx->ingress_ifindex) with
BPF_PROG_TEST_RUN's live-frames mode on the sending port: the frame goes out of that port
(ndo_xdp_xmit) to its peer, which runs its own XDP program on it as on any forwarded frame.
"""
from __future__ import annotations

import ctypes as ct
import os
import struct

from dataplane.closing import Closing
from dataplane.xdp.progtest import BPF_PROG_TEST_RUN, XdpMd, _TestAttr, bpf

BPF_PROG_LOAD = 5
BPF_PROG_TYPE_XDP = 6
BPF_FUNC_REDIRECT = 23
BPF_F_TEST_XDP_LIVE_FRAMES = 1 << 1
XDP_MD_INGRESS_IFINDEX = 12


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("=BBhi", code, (src << 4) | dst, off, imm)


# r1 = ctx->ingress_ifindex; r2 = 0; return bpf_redirect(r1, r2)
PROGRAM = (_insn(0x61, dst=1, src=1, off=XDP_MD_INGRESS_IFINDEX) + _insn(0xB7, dst=2)
           + _insn(0x85, imm=BPF_FUNC_REDIRECT) + _insn(0x95))


class _LoadAttr(ct.Structure):
    """union bpf_attr, BPF_PROG_LOAD's first members (the rest stays zero)."""
    _fields_ = [("prog_type", ct.c_uint32), ("insn_cnt", ct.c_uint32), ("insns", ct.c_uint64),
                ("license", ct.c_uint64), ("log_level", ct.c_uint32), ("log_size", ct.c_uint32),
                ("log_buf", ct.c_uint64), ("kern_version", ct.c_uint32), ("prog_flags", ct.c_uint32),
                ("prog_name", ct.c_char * 16), ("_rest", ct.c_uint8 * 64)]


class Injector(Closing):
    """The loaded program (one fd for any namespace); close() when done."""

    def __init__(self):
        insns = ct.create_string_buffer(PROGRAM, len(PROGRAM))
        license_ = ct.create_string_buffer(b"GPL")
        attr = _LoadAttr(prog_type=BPF_PROG_TYPE_XDP, insn_cnt=len(PROGRAM) // 8,
                         insns=ct.addressof(insns), license=ct.addressof(license_),
                         prog_name=b"railab_inject")
        self.fd = bpf(BPF_PROG_LOAD, attr)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def inject(self, ifindex: int, frame: bytes) -> None:
        """Send `frame` out of ifindex, a device of the calling thread's namespace (its
        peer must take XDP frames: an XDP program or GRO on it). Raises OSError."""
        buf = ct.create_string_buffer(bytes(frame), len(frame))
        ctx = XdpMd(data=0, data_end=len(frame), data_meta=0, ingress_ifindex=ifindex)
        attr = _TestAttr(prog_fd=self.fd, data_size_in=len(frame), data_in=ct.addressof(buf),
                         repeat=1, flags=BPF_F_TEST_XDP_LIVE_FRAMES,
                         ctx_in=ct.addressof(ctx), ctx_size_in=ct.sizeof(ctx))
        bpf(BPF_PROG_TEST_RUN, attr)
