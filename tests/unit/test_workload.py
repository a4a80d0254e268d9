"""Workload YAML: validation errors, reproducibility, patterns, byte mix, distributions."""
from __future__ import annotations

import collections
import fnmatch
import textwrap
import tomllib
from pathlib import Path

import jsonschema
import pytest

import dataplane
from dataplane import units
from dataplane.errors import RailabError
from dataplane.traffic import workload, workloadschema
from dataplane.traffic.sizes import parse_dist
from dataplane.traffic.transport import TRANSPORTS, DcqcnParams
from dataplane.wire import roce
from dataplane.traffic.workload import (Host, Nic, WorkloadError, generate, load,
                                        load_dict, load_flows, parse_duration,
                                        parse_rate, parse_size)
import random


def hosts(n=3, rails=2):
    return [{"name": f"h{i + 1}",
             "nics": [{"ifname": f"eth{r}", "ip": f"10.{r}.0.{i + 1}", "rail": r}
                      for r in range(rails)]} for i in range(n)]


BASE = textwrap.dedent("""\
    name: demo
    seed: 7
    duration: 2s
    mtu: 1024
    rate: 200Mbps
    mix: {elephant: 0.7, mice: 0.2, protocol: 0.1}
    classes:
      elephant: {size: {lognormal: {median: 256KiB, sigma: 0.5}}, opcode: write}
      mice: {size: [[4KiB, 3], [32KiB, 1]]}
      protocol: {size: 64}
    hosts:
      - name: h1
        nics: [{ifname: eth0, ip: 10.0.0.1}, {ifname: eth1, ip: 10.1.0.1}]
      - name: h2
        nics: [{ifname: eth0, ip: 10.0.0.2}, {ifname: eth1, ip: 10.1.0.2}]
      - name: h3
        nics: [{ifname: eth0, ip: 10.0.0.3}, {ifname: eth1, ip: 10.1.0.3}]
    pattern: {type: ring-allreduce}
    """)


@pytest.fixture
def wfile(tmp_path):
    def write(text=BASE, name="wl.yaml"):
        p = tmp_path / name
        p.write_text(text)
        return p
    return write


def test_units():
    assert parse_size("64KiB") == 65536 and parse_size("1MB") == 10**6
    assert parse_size(4096) == 4096 and parse_size("2 MiB") == 2 << 20
    assert parse_rate("200Mbps").bps(0) == 2e8
    r = parse_rate("20kpps")
    assert r.unit == "pps" and r.bps(1000) == 20e3 * 8000
    assert parse_duration("500ms") == 0.5 and parse_duration(3) == 3.0
    with pytest.raises(ValueError):
        parse_rate("fast")


def test_ring_allreduce_is_rail_local_ring(wfile):
    fl = load_flows(wfile())
    assert len(fl) == 3 * 2 * 3          # hosts x rails x classes
    assert all(f.src_rail == f.dst_rail for f in fl)
    assert all(f.src_ip.split(".")[1] == f.dst_ip.split(".")[1] for f in fl)
    ring = {(f.src_host, f.dst_host) for f in fl}
    assert ring == {("h1", "h2"), ("h2", "h3"), ("h3", "h1")}
    assert collections.Counter(f.cls for f in fl) == {"elephant": 6, "mice": 6, "protocol": 6}
    assert {f.opcode for f in fl if f.cls == "elephant"} == {"write"}
    assert len({f.flow_id for f in fl}) == len(fl)


def test_reproducible_and_seed_sensitive(wfile):
    p = wfile()
    a, b = load_flows(p), load_flows(p)
    assert a == b
    c = load_flows(p, seed=8)
    assert [f.messages for f in a] != [f.messages for f in c]
    assert [(f.src_ip, f.dst_ip, f.cls) for f in a] == [(f.src_ip, f.dst_ip, f.cls) for f in c]


def test_rates_and_byte_mix(wfile):
    fl = load_flows(wfile())
    per_sender = collections.defaultdict(float)
    for f in fl:
        per_sender[(f.src_host, f.src_ifname)] += f.rate_bps
    assert all(v == pytest.approx(200e6) for v in per_sender.values())
    wire = collections.Counter()
    for f in fl:
        wire[f.cls] += f.wire_bytes
    tot = sum(wire.values())
    assert wire["elephant"] / tot == pytest.approx(0.7, abs=0.03)
    assert wire["mice"] / tot == pytest.approx(0.2, abs=0.02)
    assert wire["protocol"] / tot == pytest.approx(0.1, abs=0.01)
    # offered load ~ rate x duration (messages start before the end; the last may run over)
    assert tot * 8 / 2.0 / 6 == pytest.approx(200e6, rel=0.05)


def test_messages_within_duration_and_paced(wfile):
    fl = load_flows(wfile())
    for f in fl:
        starts = [m.start_ns for m in f.messages]
        assert starts == sorted(starts) and starts[-1] < 2e9
        assert [m.msg_id for m in f.messages] == list(range(len(f.messages)))
        assert all(m.size >= roce.RAILAB_HLEN for m in f.messages)
    e = next(f for f in fl if f.cls == "elephant")
    m0, m1 = e.messages[:2]
    assert m0.start_ns == 0                # paced: back to back at the flow rate
    npk = len(roce.segment_message(m0.size, 1024))
    bits = (m0.size + npk * roce.frame_len(0) + 3) * 8
    assert m1.start_ns == pytest.approx(bits / e.rate_bps * 1e9, abs=1)
    mice = [f for f in fl if f.cls == "mice"]
    assert {m.size for f in mice for m in f.messages} == {4096, 32768}
    assert {m.size for f in fl if f.cls == "protocol" for m in f.messages} == {64}


def test_ports_and_qps_unique(wfile):
    fl = load_flows(wfile())
    by_src = collections.defaultdict(list)
    for f in fl:
        by_src[f.src_ip].append(f.src_port)
        assert 49152 <= f.src_port <= 65535 and f.dst_port == 4791
    assert all(len(v) == len(set(v)) for v in by_src.values())
    qps = collections.defaultdict(list)
    for f in fl:
        qps[f.src_ip].append(f.src_qp)
        qps[f.dst_ip].append(f.dst_qp)
    assert all(len(v) == len(set(v)) for v in qps.values())


def _wl(pattern, **kw):
    doc = {"seed": 1, "duration": "100ms", "rate": "100Mbps", "pattern": pattern}
    doc.update(kw)
    return load_dict(doc, "t.yaml")


def test_all_to_all_counts_and_pxn():
    hs = hosts(4, 2)
    fl = generate(_wl({"type": "all-to-all"}, mix={"elephant": 1}), hs)
    assert len(fl) == 4 * 2 * 3 * 2     # GPUs x GPUs on other hosts
    assert all(f.src_host != f.dst_host for f in fl)
    cross = [f for f in fl if f.src_rail != f.dst_rail]
    assert len(cross) == len(fl) // 2
    fl = generate(_wl({"type": "all-to-all", "rails": "same"}, mix={"elephant": 1}), hs)
    assert len(fl) == 4 * 2 * 3 and all(f.src_rail == f.dst_rail for f in fl)
    fl = generate(_wl({"type": "all-to-all", "pxn": True}, mix={"elephant": 1}), hs)
    assert all(f.src_rail == f.dst_rail for f in fl)        # PXN: leave on dst's rail
    assert len(fl) == 4 * 2 * 3 * 2


def test_cross_rail_pairs():
    hs = hosts(3, 4)
    fl = generate(_wl({"type": "cross-rail", "shift": 1}, mix={"mice": 1}), hs)
    assert len(fl) == 3 * 4
    for f in fl:
        assert f.dst_rail == (f.src_rail + 1) % 4
        assert int(f.dst_host[1:]) == int(f.src_host[1:]) % 3 + 1


@pytest.mark.parametrize("n_hosts,rails", [(2, 1), (3, 2), (8, 2), (5, 4)])
def test_permutation_sends_once_and_receives_once_never_to_itself(n_hosts, rails):
    hs = hosts(n_hosts, rails)
    fl = generate(_wl({"type": "permutation"}, mix={"elephant": 1}), hs)
    sources = [(f.src_host, f.src_rail) for f in fl]
    dests = [(f.dst_host, f.dst_rail) for f in fl]
    everyone = {(h["name"], r) for h in hs for r in range(rails)}
    assert set(sources) == set(dests) == everyone and len(fl) == len(everyone)
    assert all(f.src_host != f.dst_host for f in fl)


def test_permutation_follows_the_seed():
    def draw(seed):
        return [(f.src_host, f.dst_host, f.dst_rail) for f in
                generate(_wl({"type": "permutation"}, mix={"elephant": 1}, seed=seed), hosts(8, 2))]
    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


def test_permutation_that_cannot_exist_is_refused():
    hs = hosts(2, 2)
    hs[1]["nics"] = hs[1]["nics"][:1]           # 2 NICs on h1, 1 on h2: h1's two need h2
    hs.append({"name": "h3", "nics": []})
    with pytest.raises(WorkloadError, match="permutation.*at most half"):
        generate(_wl({"type": "permutation"}, mix={"elephant": 1}), hs)


def test_explicit_flows():
    wl = _wl({"type": "flows", "flows": [
        {"src": "h1:eth0", "dst": "h2:eth1", "class": "elephant", "rate": "1Gbps",
         "size": "1MiB", "messages": 5},
        {"src": "h2:0", "dst": "h1:0"}]})
    fl = generate(wl, hosts(2, 2))
    assert len(fl) == 1 + 3
    f = fl[0]
    assert (f.cls, f.src_ip, f.dst_ip, f.rate_bps) == ("elephant", "10.0.0.1", "10.1.0.2", 1e9)
    assert [m.size for m in f.messages] == [1 << 20] * 5
    assert {g.src_ip for g in fl[1:]} == {"10.0.0.2"}


def test_size_distributions():
    rng = random.Random(3)
    d = parse_dist({"uniform": {"min": 100, "max": 200}}, "x")
    assert all(100 <= d.sample(rng) <= 200 for _ in range(500))
    d = parse_dist({"lognormal": {"median": "1MiB", "sigma": 2, "min": "64KiB",
                                  "max": "4MiB"}}, "x")
    v = [d.sample(rng) for _ in range(2000)]
    assert min(v) == 65536 and max(v) == 4 << 20       # clamped both ways
    assert sorted(v)[1000] == pytest.approx(1 << 20, rel=0.15)
    d = parse_dist([[10, 1], [20, 3]], "x")
    c = collections.Counter(d.sample(rng) for _ in range(4000))
    assert set(c) == {10, 20} and c[20] / 4000 == pytest.approx(0.75, abs=0.03)
    assert parse_dist({"fixed": "2KiB"}, "x").sample(rng) == 2048


@pytest.mark.parametrize("edit,field", [
    ("mix: {elephant: -1, mice: 0.2, protocol: 0.1}", "mix.elephant"),
    ("rate: fast", "rate"),
    ("pattern: {type: butterfly}", "pattern.type"),
    ("mtu: 1000", "mtu"),
    ("duration: soon", "duration"),
    ("classes: {mice: {size: {uniform: {min: 1}}}}", "classes.mice.size"),
    ("bogus: 1", "bogus"),
])
def test_schema_errors_one_line_with_file_and_field(wfile, edit, field):
    key = edit.split(":")[0]
    lines = [ln for ln in BASE.splitlines() if not ln.startswith(key + ":")]
    if key == "classes":
        lines = [ln for ln in lines if not ln.startswith("  ")
                 or ln.startswith("  - name") or ln.startswith("    nics")]
    p = wfile("\n".join(lines) + "\n" + edit + "\n")
    with pytest.raises(WorkloadError) as ei:
        load(p)
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith(str(p) + ": ")
    assert field in msg
    assert isinstance(ei.value, RailabError)


@pytest.mark.parametrize("doc,message", [
    ({"rate": "fast"}, "rate: 'fast' is not a rate like 200Mbps, 10Gbps or 50kpps"),
    ({"pattern": {"type": "flows", "flows": [{"src": "h1", "dst": "h2:eth0"}]}},
     "pattern.flows[0].src: 'h1' is not host:ifname or host:rail, e.g. h1:eth0"),
    ({"classes": {"mice": {"size": {"uniform": {"min": 1}}}}}, "classes.mice.size.uniform: 'max' is a required property"),
    ({"hosts": [{"name": "a", "nics": [{"ifname": "e", "ip": "x"}]}]}, "hosts[0].nics[0].ip: 'x' is not an IPv4 address"),
])
def test_schema_hints_reach_through_the_files_refs(doc, message):
    """The schema file shares its pieces by "$ref"; the hints still name what was expected."""
    with pytest.raises(WorkloadError) as ei:
        workloadschema.validate({"pattern": {"type": "ring-allreduce"}, **doc}, "wl.yaml")
    assert str(ei.value) == f"wl.yaml: {message}"


def test_schema_file_agrees_with_the_code():
    """The JSON schema spells out railab's own patterns and enums; they must stay the code's."""
    schema = workloadschema.SCHEMA
    defs, top = schema["$defs"], schema["properties"]
    assert defs["size"]["anyOf"][1]["pattern"] == units.SIZE_RE.pattern
    assert defs["rate"]["anyOf"][1]["pattern"] == units.RATE_RE.pattern
    assert defs["duration"]["anyOf"][1]["pattern"] == units.TIME_RE.pattern
    assert defs["flow"]["properties"]["class"]["enum"] == list(workload.CLASSES)
    assert list(top["mix"]["properties"]) == list(top["classes"]["properties"]) == list(workload.CLASSES)
    assert top["mtu"]["enum"] == list(roce.MTUS)
    assert top["qp"]["enum"] == list(workload.QP_MODES)
    kinds, config = top["transport"]["anyOf"]
    assert kinds["enum"] == config["properties"]["kind"]["enum"] == list(TRANSPORTS)
    assert list(top["dcqcn"]["anyOf"][1]["properties"]) == list(DcqcnParams.option_names())
    jsonschema.Draft202012Validator.check_schema(schema)


def test_schema_file_ships_with_the_package():
    """pyproject.toml's package data takes the schema folder's JSON files."""
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["dataplane"]
    relative = workloadschema.SCHEMA_PATH.relative_to(Path(dataplane.__file__).resolve().parent)
    assert any(fnmatch.fnmatch(str(relative), g) for g in globs), (relative, globs)


def test_semantic_errors(wfile):
    with pytest.raises(WorkloadError, match=r"wl\.yaml: pattern\.flows\[0\]\.dst: unknown host 'h9'"):
        load_flows(wfile(BASE.replace("pattern: {type: ring-allreduce}",
                                      "pattern: {type: flows, flows: [{src: h1:eth0, dst: h9:eth0}]}")))
    with pytest.raises(WorkloadError, match="mix: all class shares are zero"):
        load_flows(wfile(BASE.replace("mix: {elephant: 0.7, mice: 0.2, protocol: 0.1}",
                                      "mix: {elephant: 0}")))
    with pytest.raises(WorkloadError, match="missing.yaml: file not found"):
        load("/nonexistent/missing.yaml")
    with pytest.raises(WorkloadError, match="not valid YAML: .* at line 2"):
        load(wfile("a: [1,\n"))
    with pytest.raises(WorkloadError, match="needs at least 2 hosts"):
        generate(_wl({"type": "ring-allreduce"}), hosts(1, 2))


def test_host_objects_accepted():
    hs = [Host("a", (Nic("eth0", "10.0.0.1", 0),)), Host("b", (Nic("eth0", "10.0.0.2", 0),))]
    fl = generate(_wl({"type": "ring-allreduce"}, mix={"protocol": 1}), hs)
    assert {(f.src_host, f.dst_host) for f in fl} == {("a", "b"), ("b", "a")}


def test_flows_by_sender(wfile):
    from dataplane.traffic.workload import flows_by_sender
    fl = load_flows(wfile())
    g = flows_by_sender(fl)
    assert len(g) == 6 and sum(len(v) for v in g.values()) == len(fl)
    assert all(f.src_host == h and f.src_ifname == i for (h, i), v in g.items() for f in v)


def test_pattern_messages_caps_every_flow_and_its_schedule_end():
    """A collective's fixed transfer: pattern.messages caps each flow; schedule_end_s is
    the last message's start plus its frames at the flow's rate."""
    hs = hosts(4, 2)
    doc = {"type": "all-to-all", "messages": 3}
    fl = generate(_wl(doc, mix={"elephant": 1}, duration="10s"), hs)
    assert fl and all(len(f.messages) == 3 for f in fl)
    for f in fl:
        last = f.messages[-1]
        bits = (last.size + len(roce.segment_message(last.size, f.mtu)) * roce.frame_len(0) + 3) * 8
        assert f.schedule_end_s == pytest.approx(last.start_ns / 1e9 + bits / f.rate_bps)
    uncapped = generate(_wl({"type": "all-to-all"}, mix={"elephant": 1}, duration="10s"), hs)
    assert all(len(f.messages) > 3 for f in uncapped)
    with pytest.raises(WorkloadError, match="messages"):
        load_dict({"pattern": {"type": "ring-allreduce", "messages": 0}})


def test_qp_per_message_makes_each_message_its_own_qp():
    doc = {"seed": 3, "duration": "2s", "rate": "10Mbps", "transport": "go-back-n",
           "mix": {"elephant": 1}, "pattern": {"type": "all-to-all", "rails": "same"},
           "classes": {"elephant": {"size": {"cdf": "websearch", "scale": 0.01}, "arrival": "poisson"}}}
    per_pair = generate(load_dict(doc), hosts(3, 1))
    per_msg = generate(load_dict({**doc, "qp": "per-message"}), hosts(3, 1))
    # the same messages, one QP each
    assert len(per_pair) == 6
    assert sorted((f.src_host, f.dst_host, m.size, m.start_ns) for f in per_pair for m in f.messages) == \
        sorted((f.src_host, f.dst_host, m.size, m.start_ns) for f in per_msg for m in f.messages)
    assert all(len(f.messages) == 1 for f in per_msg) and len(per_msg) > 6 * 5
    for ip in {f.src_ip for f in per_msg}:
        mine = [f for f in per_msg if f.src_ip == ip]
        assert len({f.src_port for f in mine}) == len(mine)       # ECMP hashes every message anew
        assert len({f.src_qp for f in mine}) == len(mine)
    # the offered rate is split over the pair's messages, so the sum stays the pair's
    for a, b in [("h1", "h2"), ("h2", "h3")]:
        whole = sum(f.rate_bps for f in per_pair if (f.src_host, f.dst_host) == (a, b))
        parts = sum(f.rate_bps for f in per_msg if (f.src_host, f.dst_host) == (a, b))
        assert parts == pytest.approx(sum(f.wire_bytes for f in per_pair
                                          if (f.src_host, f.dst_host) == (a, b)) * 8 / 2.0, rel=0.01)
        assert 0.3 * whole < parts < 3 * whole      # Poisson draws around the pair's rate


def test_qp_per_message_needs_a_closed_loop_transport():
    with pytest.raises(WorkloadError, match=r"qp: per-message needs a closed-loop transport"):
        load_dict({"qp": "per-message", "pattern": {"type": "all-to-all"}}, "wl.yaml")
    with pytest.raises(WorkloadError, match=r"wl.yaml: qp: 'each' is not one of"):
        load_dict({"qp": "each", "transport": "go-back-n", "pattern": {"type": "all-to-all"}}, "wl.yaml")


def test_gap_us_idles_after_every_message_in_real_fabric_time():
    """A collective's chunks: each at the flow's rate, then gap_us of real-fabric time,
    stretched by the experiment's time scale like every time constant."""
    doc = {"seed": 1, "duration": "3s", "rate": "1Mbps", "mix": {"elephant": 1},
           "classes": {"elephant": {"size": "16KiB", "arrival": "paced", "gap_us": 1.5}},
           "pattern": {"type": "cross-rail"}}
    for stretch in (1.0, 200_000.0, 800_000.0):
        wl = load_dict(doc)
        wl.stretch = stretch
        f = generate(wl, hosts(2, 2))[0]
        bits = (16384 + len(roce.segment_message(16384, f.mtu)) * roce.frame_len(0) + 3) * 8
        step = bits / f.rate_bps + 1.5e-6 * stretch
        starts = [m.start_ns / 1e9 for m in f.messages]
        assert len(starts) >= 2
        assert all(b - a == pytest.approx(step, rel=1e-6) for a, b in zip(starts, starts[1:]))
    with pytest.raises(WorkloadError, match="gap_us"):
        load_dict({**doc, "classes": {"elephant": {"gap_us": -1}}})


def test_an_experiments_scale_stretches_the_workloads_gaps(tmp_path):
    from dataplane.experiment import spec
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    exp = spec.load(root / "experiments" / "ecmp-vs-spray.yml")
    assert exp.workload.stretch == pytest.approx(1 / exp.port_model["scale"])
    assert exp.workload.classes["elephant"].gap_us > 0


def test_a_flows_load_is_a_share_of_the_line_rate_at_every_scale():
    """pfc-incast gives its flows as loads: each sender's rate follows the lab's scale, so
    the 2.4x overload of the receiver's port is the same at 5e-6 and 5e-5."""
    from dataplane.experiment import spec
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    path = root / "experiments" / "pfc-incast.yml"
    for scale in (5e-6, 5e-5):
        exp = spec.load(path, {"port_model": {"scale": scale}})
        line = spec.host_line_bps(exp.lab_file, scale)
        flows = exp.workload.pattern["flows"]
        offered = sum(units.parse_rate(f["rate"]).bps(exp.workload.mtu_frame_bytes)
                      for f in flows if f.get("class") == "elephant")
        assert offered == pytest.approx(2.4 * line, rel=1e-6)


def test_every_shipped_experiment_runs_at_20_mbps_ports_or_faster():
    """The kernel NIC keeps up at 400G x 5e-5 = 20 Mb/s: no shipped experiment goes slower
    (scale 0 or none: no port model, ports as fast as the machine)."""
    from dataplane.experiment import spec
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    files = sorted((root / "experiments").glob("*.yml"))
    slow = {}
    for path in files:
        doc = __import__("yaml").safe_load(path.read_text())
        if not isinstance(doc, dict) or "modes" not in doc:
            continue                      # a workload file the experiments include
        exp = spec.load(path)
        scales = [exp.port_model.get("scale")] + [m.port_model.get("scale") for m in exp.modes
                                                  if getattr(m, "port_model", None)]
        slow.update({path.name: s for s in scales if s and s < 5e-5})
    assert len(files) >= 15 and not slow, slow
