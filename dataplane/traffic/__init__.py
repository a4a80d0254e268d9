"""RoCEv2 traffic: packets, workloads, sender, receiver."""
