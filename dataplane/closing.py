"""Closing: `with` support for a class that has a close() (the with block closes it)."""
from __future__ import annotations


class Closing:
    """A base for classes with a close(): `with X(...) as x:` closes x at the block's end
    (an exception in the block still propagates)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False
