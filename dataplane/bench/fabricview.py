"""The table and notes `railab bench fabric` prints from bench_fabric()'s result."""
from __future__ import annotations

from rich.table import Table

COLUMNS = ("forwarding", "port model", "frame", "flows", "delivered", "x plain Linux",
           "kpps per CPU-s", "x plain (per CPU)", "ns per packet", "ns per hop", "runs kpps")


def _f(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(result: dict) -> Table:
    t = Table(title=f"railab bench fabric: {result['path']}, delivered at the receiver (median of "
                    f"{result['repeat']} x {result['duration_s']:g} s, all rows in turn)")
    for col in COLUMNS:
        t.add_column(col, justify="left" if col in ("forwarding", "port model") else "right", no_wrap=True)
    for r in result["rows"]:
        rate = (f"{r['pps'] / 1e3:,.0f} kpps" if r["frame_bytes"] < 1000 else f"{r['bps'] / 1e9:.2f} Gb/s")
        model = f"on (x{result['port_model_scale']:g})" if r["port_model"] == "on" else r["port_model"]
        t.add_row(r["label"], model, f"{r['frame_bytes']} B", str(r["flows"]), rate, _f(r["ratio"], ".2f"),
                  _f(r["pps_per_cpu"] and r["pps_per_cpu"] / 1e3, ",.0f"), _f(r["ratio_per_cpu"], ".2f"),
                  _f(r["ns_per_packet"], ",.0f"), _f(r["hop_ns"], ",.0f"),
                  " ".join(f"{x / 1e3:.0f}" for x in r["pps_runs"]))
    return t


def notes(result: dict) -> list[str]:
    m = result["machine"]
    return [
        "plain Linux: bare namespaces, veth, static routes, ip_forward=1, nothing else (the baseline "
        "of every ratio)",
        "kpps per CPU-s: packets delivered per second of CPU run by the sender (trafgen, in whose "
        "softirqs the hops run) and the softirq threads; ns per packet is its inverse",
        f"ns per hop: (ns per packet - the one-veth row's) / {result['hops']} hops; plain Linux against "
        "the plain veth, railab's rows against the veth with railab's host settings",
        f"port model on: {result['port_model_speed_bps'] / 1e9:g} Gb/s emulated ports (400G x "
        f"{result['port_model_scale']:g}); {m['cpus']} CPUs, kernel {m['kernel']}, load average "
        f"{m['loadavg_before'][0]:.1f} before, {m['loadavg_after'][0]:.1f} after",
    ]


ACROSS_COLUMNS = ("path", "cut links", "frame", "flows", "delivered", "x within", "kpps per CPU-s",
                  "ns per packet", "runs kpps")


def across_table(result: dict) -> Table:
    """`--across-machines`: one row per path of the split lab (dataplane.bench.fabriccut)."""
    t = Table(title=f"railab bench fabric --across-machines: {result['lab']}, port model off, delivered "
                    f"at the receiver (median of {result['repeat']} x {result['duration_s']:g} s, all rows in turn)")
    for col in ACROSS_COLUMNS:
        t.add_column(col, justify="left" if col == "path" else "right", no_wrap=True)
    for r in result["rows"]:
        rate = (f"{r['pps'] / 1e3:,.0f} kpps" if r["frame_bytes"] < 1000 else f"{r['bps'] / 1e9:.2f} Gb/s")
        t.add_row(f"{r['label']}: {r['path']}", str(r["cut_links"]), f"{r['frame_bytes']} B", str(r["flows"]),
                  rate, _f(r["ratio"], ".2f"), _f(r["pps_per_cpu"] and r["pps_per_cpu"] / 1e3, ",.0f"),
                  _f(r["ns_per_packet"], ",.0f"), " ".join(f"{x / 1e3:.0f}" for x in r["pps_runs"]))
    return t


def across_notes(result: dict) -> list[str]:
    m = result["machine"]
    placed = "; ".join(f"machine {h}: {', '.join(n for n in nodes if not n.startswith('srv'))}"
                       for h, nodes in result["placement"].items())
    return [
        f"machines: network namespaces of this one joined by a veth underlay (MTU 1550); {placed}",
        "cut link: a vxlan-stitch link between machines (containerlab's veth + VXLAN at each end); "
        "each row's flows pinned to one leaf uplink by traffic-matrix entries",
        f"x within: against the within-one-machine row; {m['cpus']} CPUs, kernel {m['kernel']}, load "
        f"average {m['loadavg_before'][0]:.1f} before, {m['loadavg_after'][0]:.1f} after",
    ]
