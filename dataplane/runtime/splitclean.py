"""The machine side of removing a lab split over machines (dataplane.runtime.hostdeploy):
containerlab's own destroy of a part, run on the part's machine (it removes the
stitches' `ve-` and `vx-` devices there, which no container holds), then any stitch
device still left. lifecycle.destroy calls it for every part first."""
from __future__ import annotations

import os


from dataplane.kernel.netns import in_netns, iproute
from dataplane.runtime import containerlab as clab_runtime
from dataplane.runtime import splitstate


def parts_of(lab: str) -> list[tuple[str, str | None, list[str]]]:
    """(part, its machine's namespace, its stitch devices) of a split lab; for one part
    of it, named by itself, that part alone; [] otherwise."""
    record = splitstate.load(lab)
    if record is not None:
        return [(p["part"], p.get("netns"), p.get("stitch_devices", [])) for p in record["parts"]]
    mark = splitstate.part_mark(lab)
    if mark is None:
        return []
    owner = splitstate.load(mark["lab"]) or {"parts": []}
    return [(lab, mark.get("netns"), [d for p in owner["parts"] if p["part"] == lab
                                     for d in p.get("stitch_devices", [])])]


def machine_side(part: str, netns: str | None, devices: list[str]) -> None:
    """See the module's doc. Whoever calls it has stopped any containerlab still at work
    on the part (a deployer killed mid-deploy leaves one)."""
    if netns and not os.path.lexists(f"/run/netns/{netns}"):
        return          # the machine (a namespace of the harness) went with everything on it
    path = clab_runtime.topology_file(part)
    prefix = ["ip", "netns", "exec", netns] if netns else []
    if path.exists():
        clab_runtime.run_tool([*prefix, "containerlab", "destroy", "-t", str(path), "--cleanup", "--yes"],
                              timeout=300)
        path.unlink(missing_ok=True)
    if devices:
        with in_netns(netns):
            ipr = iproute()
        try:
            for name in devices:
                for index in ipr.link_lookup(ifname=name):
                    ipr.link("del", index=index)
        finally:
            ipr.close()
