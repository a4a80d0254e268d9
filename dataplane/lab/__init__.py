"""The Python API over a running lab, one request to its agent at a time: load balancing,
traffic matrix and counters (fabric.Fabric), fault injection (faults), reachability
(probe)."""
