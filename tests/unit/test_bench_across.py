"""`railab bench fabric --across-machines` without a lab: the three paths it measures on
clos2 split over two machines, the underlay subnet it picks, and its refusals."""
from __future__ import annotations

from ipaddress import IPv4Network
from pathlib import Path

import pytest

from dataplane.bench import fabriccut
from dataplane.cli.main import main
from dataplane.runtime import emulated, labspec
from dataplane.topology import clab, multihost

ROOT = Path(__file__).resolve().parents[2]


def split_clos2():
    topo = clab.read(ROOT / "labs" / "clos2" / "clos2.clab.yml")
    hosts = multihost.parse_hosts("a=192.0.2.1,b=192.0.2.2")
    return labspec.build(topo, "clos2.clab.yml", runtime="containerlab"), multihost.place(topo, hosts)


def test_the_three_paths_cross_zero_one_and_two_cut_links():
    spec, where = split_clos2()
    within, cut, cut2 = fabriccut.split_paths(spec, where)
    assert [p.row for p in (within, cut, cut2)] == list(fabriccut.ROWS)
    assert within.text == "srv1:nic0 -> leaf1 -> spine1 -> leaf2 -> srv3:nic0"
    assert cut.text == "srv1:nic0 -> leaf1 -> spine1 -> leaf3 -> srv5:nic0"
    assert cut2.text == "srv1:nic0 -> leaf1 -> spine2 -> leaf2 -> srv3:nic0"
    assert [p.cut_links for p in (within, cut, cut2)] == [0, 1, 2]
    # where the placement says: leaf1, spine1, leaf2 on one machine; spine2, leaf3 on the other
    assert where["leaf1"] == where["spine1"] == where["leaf2"] != where["spine2"] == where["leaf3"]
    leaf1 = spec.node("leaf1")
    for p in (within, cut, cut2):
        assert p.leaf == "leaf1" and leaf1.interface(p.uplink).peer_node == p.spine
        assert leaf1.interface(p.uplink).peer_if == p.spine_port
        assert p.path.tx_ip == "10.0.0.2" and p.path.gateway_mac == leaf1.interface("down1").mac
    assert within.path.rx_ip == cut2.path.rx_ip != cut.path.rx_ip


def test_a_lab_on_one_machine_has_no_path_across():
    spec, where = split_clos2()
    with pytest.raises(ValueError, match="a spine on its machine and one on another"):
        fabriccut.split_paths(spec, {node: "a" for node in where})


def test_the_underlay_takes_the_first_free_subnet_of_the_benchmark_block():
    assert emulated.free_subnet([]) == "198.18.0"
    used = [IPv4Network("198.18.0.0/24"), IPv4Network("198.18.1.7/32"), IPv4Network("10.0.0.0/8")]
    assert emulated.free_subnet(used) == "198.18.2"
    with pytest.raises(RuntimeError, match="in use"):
        emulated.free_subnet([IPv4Network("198.18.0.0/15")])


@pytest.mark.parametrize("flag", [["--scale", "0.5"], ["--no-bare"], ["--no-generic"]])
def test_the_one_machine_options_are_refused_with_across_machines(flag, capsys, monkeypatch):
    monkeypatch.setattr("dataplane.runtime.lifecycle.require_root", lambda: None)
    assert main(["bench", "fabric", "--across-machines", *flag]) != 0
    err = capsys.readouterr().err.strip()
    assert f"{flag[0]}: not with --across-machines" in err and len(err.splitlines()) == 1


def test_missing_tools_are_named_in_one_line(monkeypatch):
    monkeypatch.setattr(fabriccut.shutil, "which", lambda tool: None)
    with pytest.raises(fabriccut.RuntimeStateError) as err:
        fabriccut.require_tools()
    text = str(err.value)
    assert "needs Docker, containerlab and railab's images" in text and "\n" not in text
    assert "docker" in text and "containerlab" in text
