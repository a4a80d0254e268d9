"""The XDP switch's tables, one module per family; SwitchDataplane
(dataplane.xdp.switch) is their union over one loaded BPF object.

ports          switches, switch ports, hosts learned from ARP
groups         next-hop groups, load-balancing modes, flowlets
routes         routes, avoid masks, the switches' own addresses
portmodel      the emulated egress port (speed, buffer, ECN) and PFC
trafficmatrix  5-tuples pinned to an egress port
flows          per-flow accounting (flow visibility)
counters       port, member, verdict and drop counters
notices        ARN / FGLB notices made and consumed in the data plane, their exclusions

Each family keeps the shadow state it owns on the SwitchDataplane instance (its module
says which) and writes maps through SwitchDataplane.maps (dataplane.xdp.bpfio.BpfMaps).
"""
