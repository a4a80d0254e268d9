"""Bad input to the commands that change a running lab: one line naming what is wrong,
exit status 2, no traceback, and the lab as it was (each case found by fuzzing the CLI)."""
from __future__ import annotations

import pytest

from dataplane.lab.fabric import Fabric

from .conftest import deployed, railab


@pytest.fixture(scope="module")
def lab():
    with deployed("clos2", "bad") as spec:
        yield spec.name


CASES = {
    "seed-text": (["lb", "set", "{lab}", "--switch", "leaf1", "--seed", "abc"], "--seed"),
    "seed-huge": (["lb", "set", "{lab}", "--switch", "leaf1", "--seed", "99999999999999999999"], "--seed"),
    "lbn-list": (["lb", "set", "{lab}", "--switch", "leaf1", "--lbn", "1,2"], "--lbn"),
    "lbn-text": (["lb", "set", "{lab}", "--switch", "leaf1", "--lbn", "down1=abc"], "--lbn"),
    "lbn-negative": (["lb", "set", "{lab}", "--switch", "leaf1", "--lbn", "down1=-1"], "--lbn"),
    "lbn-unknown-port-with-seed": (["lb", "set", "{lab}", "--switch", "leaf1", "--seed", "7",
                                    "--lbn", "nope=1"], "no interface"),
    "weights-text": (["lb", "set", "{lab}", "--switch", "leaf1", "--mode", "wcmp", "--weights", "a,b"],
                     "--weights"),
    "weights-misfit": (["lb", "set", "{lab}", "--switch", "leaf1", "--mode", "wcmp", "--weights", "1,2,3"],
                       "3 weights given"),
    "weights-unknown-port": (["lb", "set", "{lab}", "--switch", "leaf1", "--mode", "wcmp",
                              "--weights", "up1=1,up9=3"], "up9"),
    "weights-without-wcmp": (["lb", "set", "{lab}", "--switch", "leaf1", "--mode", "ecmp",
                              "--weights", "1,2,3,4"], "wcmp"),
    "hash-field": (["lb", "set", "{lab}", "--switch", "leaf1", "--hash-fields", "nope"], "hash field"),
    "window-nan": (["lb", "port-model", "{lab}", "--window-us", "nan"], "window_us"),
    "buffer-huge": (["lb", "port-model", "{lab}", "--buffer-bytes", "99999999999999"], "buffer_bytes"),
    "ecn-below-minus-one": (["lb", "port-model", "{lab}", "--ecn-bytes", "-5"], "ecn_bytes"),
    "ecn-red-kmax-below-kmin": (["lb", "port-model", "{lab}", "--ecn", "8000,4000,0.1"], "Kmax"),
    "ecn-red-two-numbers": (["lb", "port-model", "{lab}", "--ecn", "1000,2000"], "--ecn"),
    "ecn-red-pmax-above-one": (["lb", "port-model", "{lab}", "--ecn", "1000,2000,1.5"], "Pmax"),
    "pfc-on-virtual-queue": (["lb", "port-model", "{lab}", "--pfc", "on"], "virtual queue"),
    "pfc-xon-above-xoff": (["lb", "port-model", "{lab}", "--queue", "real", "--pfc", "on",
                            "--xoff-bytes", "4000", "--xon-bytes", "5000"], "XON 5000 B"),
    "pfc-headroom-below-a-frame": (["lb", "port-model", "{lab}", "--queue", "real", "--pfc", "on",
                                    "--headroom-bytes", "100"], "smaller than one frame"),
    "pfc-thresholds-beyond-buffer": (["lb", "port-model", "{lab}", "--queue", "real", "--pfc", "on",
                                      "--xoff-bytes", "100000000"], "do not fit"),
    "pfc-unknown-priority": (["lb", "port-model", "{lab}", "--pfc-priority", "9"], "PFC priority 9"),
    "pfc-priority-of-cnps": (["lb", "port-model", "{lab}", "--pfc-priority", "6"], "CNPs"),
    "pfc-dscp-out-of-range": (["lb", "port-model", "{lab}", "--pfc-dscp", "64"], "PFC DSCP 64"),
    "flowlet-gap-negative": (["lb", "set", "{lab}", "--switch", "leaf1", "--flowlet-timeout-us", "-5"],
                             "real-fabric"),
    "window-beyond-a-second": (["lb", "port-model", "{lab}", "--window-us", "2000000"], "window_us"),
    "scale-too-slow": (["lb", "port-model", "{lab}", "--scale", "0.000000001"], "slowest port"),
    "degrade-above-nominal": (["fault", "{lab}", "degrade", "spine1:down1", "--speed", "800G"], "at most"),
    "degrade-too-slow": (["fault", "{lab}", "degrade", "spine1:down1", "--speed", "100"], "below"),
    "arn-util": (["fault", "{lab}", "arn", "--util", "2"], "arn_util"),
    "arn-poll-zero": (["fault", "{lab}", "arn", "--poll-ms", "0"], "poll_ms"),
    "arn-granularity": (["fault", "{lab}", "arn", "--on", "--granularity", "packet"], "granularity"),
    "arn-on-off": (["fault", "{lab}", "arn", "--on", "--off"], "not allowed"),
    "tm-port-range": (["tm", "add", "{lab}", "--switch", "leaf1", "--src", "10.0.0.2", "--dst", "10.0.1.2",
                       "--sport", "70000", "--egress", "up1"], "port number"),
    "tm-icmp-ports": (["tm", "add", "{lab}", "--switch", "leaf1", "--src", "10.0.0.2", "--dst", "10.0.1.2",
                       "--proto", "icmp", "--sport", "5", "--egress", "up1"], "no ports"),
    "tm-unknown-egress": (["tm", "add", "{lab}", "--switch", "leaf1", "--src", "10.0.0.2",
                           "--dst", "10.0.1.2", "--egress", "nope"], "no interface 'nope'"),
    "tm-del-missing": (["tm", "del", "{lab}", "--switch", "leaf1", "--src", "10.0.0.2", "--dst", "10.0.1.9"],
                       "no traffic-matrix entry"),
    "counters-unknown-switch": (["counters", "{lab}", "--switch", "nope"], "nope"),
    "top-unknown-switch": (["top", "{lab}", "--switch", "nope", "--once"], "nope"),
    "top-interval-nan": (["top", "{lab}", "--interval", "nan", "--once"], "--interval"),
    "top-limit-zero": (["top", "{lab}", "--limit", "0", "--once"], "--limit"),
    "fault-unknown-lab": (["fault", "nosuchlab", "clear"], "not deployed"),
    "bench-runs-zero": (["bench", "dataplane", "--runs", "0"], "--runs"),
    "nav-interval-zero": (["nav", "{lab}", "start", "--interval", "0"], "interval must be more than 0"),
    "nav-interval-negative": (["nav", "{lab}", "start", "--interval", "-2"], "interval must be more than 0"),
    "nav-unknown-lab": (["nav", "nosuchlab", "status"], "not deployed"),
    "flows-window-zero": (["counters", "{lab}", "--flows", "--window-us", "0"], "window_us"),
    "flows-unknown-switch": (["counters", "{lab}", "--flows", "--switch", "nope"], "nope"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_and_changes_nothing(lab, case):
    argv, says = CASES[case]
    before = Fabric(lab).show()
    proc = railab(*[a.format(lab=lab) for a in argv], check=False)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("railab: error:") and says in lines[0], proc.stderr
    assert Fabric(lab).show() == before
