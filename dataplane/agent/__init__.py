"""The per-lab agent, one process per lab (`python -m dataplane.agent LAB`).

- protocol: the requests a client may send and the counters reply (CounterSnapshot).
- client: the one client (AgentClient / request) every caller uses.
- server: the Unix-socket server, one handler per request type, and main().
- programmer: spec -> map entries; owns the routing state (RoutingState).
- monitor: fault reactions (fast failover, FGLB notices, ARN, host learning).
The BPF side is dataplane.xdp.switch (map I/O and tables) and dataplane.xdp.abi.
"""
