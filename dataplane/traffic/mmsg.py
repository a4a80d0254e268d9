"""sendmmsg(2) through ctypes: many frames, one system call (the batched paths of
dataplane.traffic.sender)."""
from __future__ import annotations

import ctypes
import ctypes.util
import socket
import time

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(_IoVec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("hdr", _MsgHdr), ("len", ctypes.c_uint)]


class MMsgBatch:
    """sendmmsg(2) through ctypes: `batch` frame buffers of up to `size` bytes, filled
    with load() and sent with one system call by send()."""

    def __init__(self, sock: socket.socket, size: int, batch: int):
        self.fd = sock.fileno()
        self.batch = batch
        self.bufs = [bytearray(size) for _ in range(batch)]
        self._c = [(ctypes.c_char * size).from_buffer(b) for b in self.bufs]
        self.iov = (_IoVec * batch)()
        self.msgs = (_MMsgHdr * batch)()
        for i in range(batch):
            self.iov[i].base = ctypes.addressof(self._c[i])
            self.iov[i].len = size
            self.msgs[i].hdr.iov = ctypes.pointer(self.iov[i])
            self.msgs[i].hdr.iovlen = 1
        self._sz = ctypes.sizeof(_MMsgHdr)
        self._base = ctypes.addressof(self.msgs)

    def load(self, i: int, frame) -> None:
        n = len(frame)
        self.bufs[i][:n] = frame
        self.iov[i].len = n

    def send(self, k: int, tries: int = 50) -> int:
        """Send messages 0..k-1; returns how many went out (retries ENOBUFS/EAGAIN)."""
        done = 0
        fails = 0
        while done < k:
            n = _libc.sendmmsg(self.fd, ctypes.c_void_p(self._base + done * self._sz),
                               k - done, 0)
            if n > 0:
                done += n
                continue
            e = ctypes.get_errno()
            fails += 1
            if e not in (105, 11, 4) or fails >= tries:   # ENOBUFS, EAGAIN, EINTR
                break
            time.sleep(20e-6)
        return done
