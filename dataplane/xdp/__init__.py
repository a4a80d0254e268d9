"""The XDP switch as the kernel sees it: the C structs' ctypes mirrors (abi), map I/O and
attach/detach (bpfio), the compiled-object cache (bpfcache), BPF_PROG_TEST_RUN (progtest),
and the loader with its tables (switch, tables)."""
