"""Checks on the sources themselves: comments that must say what the code does, test
markers that must stay narrow."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _comments(text: str) -> list[str]:
    return re.findall(r"/\*.*?\*/", text, re.S)


def test_bpf_comments_do_not_say_xdp_tx_where_the_code_redirects():
    """ARP replies leave by a redirect to the ingress port (XDP_TX only with
    PORT_F_ARP_XDP_TX): a comment naming XDP_TX must say so."""
    wrong = [f"{path.name}: {c[:80]!r}" for path in sorted((ROOT / "bpf").glob("*.[ch]"))
             for c in _comments(path.read_text()) if "XDP_TX" in c and "redirect" not in c]
    assert not wrong, wrong


def test_reruns_are_marked_on_timing_bound_tests_only():
    """A rerun marker on a whole module retries deterministic failures too."""
    marked = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "tests").rglob("test_*.py"))
              if re.search(r"^pytestmark\s*=.*flaky", path.read_text(), re.M)]
    assert not marked, marked
