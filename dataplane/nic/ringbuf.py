"""A consumer of a BPF ring buffer (BPF_MAP_TYPE_RINGBUF) by its map fd, without bcc.

The kernel's layout (kernel/bpf/ringbuf.c): mapped at offset 0 is one writable page
holding the consumer position; at one page on, the producer position's page and then
the data area, mapped twice in a row so that a record that wraps reads as one piece.
Each record starts with an 8-byte header: its length (bit 31: still being written,
bit 30: discarded) and a page offset; records are 8-byte aligned.
"""
from __future__ import annotations

import mmap
import struct

BUSY_BIT = 1 << 31
DISCARD_BIT = 1 << 30
HEADER = 8
_U64 = struct.Struct("<Q")
_LEN = struct.Struct("<I")


class RingBuffer:
    """Reads records from a ring buffer map of `size` bytes (a power of two pages)."""

    def __init__(self, map_fd: int, size: int):
        page = mmap.PAGESIZE
        if size < page or size & (size - 1):
            raise ValueError(f"ring buffer size {size}: not a power of two of pages")
        self.size = size
        self._consumer = mmap.mmap(map_fd, page, mmap.MAP_SHARED,
                                   mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        try:
            self._producer = mmap.mmap(map_fd, page + 2 * size, mmap.MAP_SHARED,
                                       mmap.PROT_READ, offset=page)
        except BaseException:
            self._consumer.close()
            raise
        self._data_at = page

    def read(self) -> list[bytes]:
        """Every record committed so far (each its payload), in order; consumes them."""
        cons = _U64.unpack_from(self._consumer, 0)[0]
        prod = _U64.unpack_from(self._producer, 0)[0]
        out = []
        mask = self.size - 1
        while cons < prod:
            at = self._data_at + (cons & mask)
            length = _LEN.unpack_from(self._producer, at)[0]
            if length & BUSY_BIT:
                break              # a producer is still writing it: the rest waits
            n = length & ~(BUSY_BIT | DISCARD_BIT)
            if not length & DISCARD_BIT:
                out.append(bytes(self._producer[at + HEADER:at + HEADER + n]))
            cons += (n + HEADER + 7) & ~7
        _U64.pack_into(self._consumer, 0, cons)
        return out

    def close(self) -> None:
        self._producer.close()
        self._consumer.close()
