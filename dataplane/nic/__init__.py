"""The emulated RoCE NIC in the kernel (issue 25): XDP programs on host ports.

So far the receive side: dataplane.nic.responder (bpf/nic/responder.c)."""
