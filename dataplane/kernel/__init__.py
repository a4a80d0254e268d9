"""Kernel plumbing below the XDP switch: entering a namespace (netns), batched route-netlink
requests (rtnl), host-port offloads (ethtool) and the tc qdiscs of real-queue mode
(realqueue)."""
