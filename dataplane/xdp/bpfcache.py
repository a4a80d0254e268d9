"""The compiled switch object, cached on disk so that a deploy loads it without bcc's
compile (1.5 s on an idle 2-core machine, tens of seconds on a busy one).

A cold load compiles with bcc as always and then records what the kernel needs to load
the same object again: each program's instructions (with the map references noted), each
map's definition, and the BTF the maps were made with (a map value holding a
bpf_spin_lock needs it). A warm load makes the BTF and the maps from that record, writes
the new map fds into the instructions and loads the programs: the kernel's verifier
still checks every program; only clang is skipped.

The key is a hash of every file under bpf/, the compile flags (the lab's table sizes),
the kernel release and the bcc version, so a changed source, kernel or bcc compiles
again. The cache lives in /var/cache/railab/bpf (RAILAB_BPF_CACHE overrides it; "off"
disables it). A record that no longer loads is compiled afresh and replaced.
"""
from __future__ import annotations

import base64
import ctypes as ct
import hashlib
import json
import os
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from dataplane.xdp.progtest import bpf

FORMAT = 1
DEFAULT_DIR = "/var/cache/railab/bpf"

BPF_MAP_CREATE, BPF_PROG_LOAD, BPF_OBJ_GET_INFO_BY_FD = 0, 5, 15
BPF_BTF_LOAD, BPF_BTF_GET_FD_BY_ID = 18, 19
BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE = 1, 2
LD_IMM64 = 0x18
BPF_OBJ_NAME_LEN = 16
PROG_SCHED_CLS, PROG_XDP = 3, 6     # enum bpf_prog_type


def cache_dir() -> Path | None:
    where = os.environ.get("RAILAB_BPF_CACHE", DEFAULT_DIR)
    return None if where == "off" else Path(where)


def cache_key(source_dir: Path, cflags: list[str], kernel: str | None = None,
              bcc_version: str | None = None) -> str:
    """Hash of the sources, flags, kernel release and bcc version (default: this machine's)."""
    kernel = kernel or os.uname().release
    bcc_version = bcc_version or _bcc_version()
    h = hashlib.sha256(f"railab-bpf-cache {FORMAT}\n".encode())
    for path in sorted(p for p in source_dir.rglob("*") if p.is_file()):
        h.update(f"{path.relative_to(source_dir)}\n".encode())
        h.update(path.read_bytes())
    h.update("\n".join(cflags).encode())
    h.update(f"\n{kernel}\n{bcc_version}\n".encode())
    return h.hexdigest()[:32]


def _bcc_version() -> str:
    # from the package's metadata: importing bcc loads libbcc (LLVM inside), a second
    # a warm load does not otherwise spend
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("bcc")
    except PackageNotFoundError:
        import bcc   # only to read its version: deferred as above
        return getattr(bcc, "__version__", "?")


# ------------------------------------------------------------------ bpf(2) attributes
class _MapCreate(ct.Structure):
    _fields_ = [("map_type", ct.c_uint32), ("key_size", ct.c_uint32), ("value_size", ct.c_uint32),
                ("max_entries", ct.c_uint32), ("map_flags", ct.c_uint32), ("inner_map_fd", ct.c_uint32),
                ("numa_node", ct.c_uint32), ("map_name", ct.c_char * BPF_OBJ_NAME_LEN),
                ("map_ifindex", ct.c_uint32), ("btf_fd", ct.c_uint32), ("btf_key_type_id", ct.c_uint32),
                ("btf_value_type_id", ct.c_uint32), ("btf_vmlinux_value_type_id", ct.c_uint32),
                ("map_extra", ct.c_uint64)]


class _ProgLoad(ct.Structure):
    _fields_ = [("prog_type", ct.c_uint32), ("insn_cnt", ct.c_uint32), ("insns", ct.c_uint64),
                ("license", ct.c_uint64), ("log_level", ct.c_uint32), ("log_size", ct.c_uint32),
                ("log_buf", ct.c_uint64), ("kern_version", ct.c_uint32), ("prog_flags", ct.c_uint32),
                ("prog_name", ct.c_char * BPF_OBJ_NAME_LEN), ("prog_ifindex", ct.c_uint32),
                ("expected_attach_type", ct.c_uint32)]


class _BtfLoad(ct.Structure):
    _fields_ = [("btf", ct.c_uint64), ("btf_log_buf", ct.c_uint64), ("btf_size", ct.c_uint32),
                ("btf_log_size", ct.c_uint32), ("btf_log_level", ct.c_uint32)]


class _InfoByFd(ct.Structure):
    _fields_ = [("bpf_fd", ct.c_uint32), ("info_len", ct.c_uint32), ("info", ct.c_uint64)]


class _MapInfo(ct.Structure):
    _fields_ = [("type", ct.c_uint32), ("id", ct.c_uint32), ("key_size", ct.c_uint32),
                ("value_size", ct.c_uint32), ("max_entries", ct.c_uint32), ("map_flags", ct.c_uint32),
                ("name", ct.c_char * BPF_OBJ_NAME_LEN), ("ifindex", ct.c_uint32),
                ("btf_vmlinux_value_type_id", ct.c_uint32), ("netns_dev", ct.c_uint64),
                ("netns_ino", ct.c_uint64), ("btf_id", ct.c_uint32), ("btf_key_type_id", ct.c_uint32),
                ("btf_value_type_id", ct.c_uint32), ("_pad", ct.c_uint32), ("map_extra", ct.c_uint64)]


class _BtfInfo(ct.Structure):
    _fields_ = [("btf", ct.c_uint64), ("btf_size", ct.c_uint32), ("id", ct.c_uint32),
                ("name", ct.c_uint64), ("name_len", ct.c_uint32), ("kernel_btf", ct.c_uint32)]


class _GetFdById(ct.Structure):
    _fields_ = [("id", ct.c_uint32), ("next_id", ct.c_uint32), ("open_flags", ct.c_uint32)]


def _info(fd: int, info: ct.Structure) -> None:
    bpf(BPF_OBJ_GET_INFO_BY_FD, _InfoByFd(fd, ct.sizeof(info), ct.addressof(info)))


class ProgInfo(ct.Structure):
    """struct bpf_prog_info (linux/bpf.h) up to verified_insns (Linux 5.16+)."""
    _fields_ = [("type", ct.c_uint32), ("id", ct.c_uint32), ("tag", ct.c_uint8 * 8),
                ("jited_prog_len", ct.c_uint32), ("xlated_prog_len", ct.c_uint32),
                ("jited_prog_insns", ct.c_uint64), ("xlated_prog_insns", ct.c_uint64),
                ("load_time", ct.c_uint64), ("created_by_uid", ct.c_uint32),
                ("nr_map_ids", ct.c_uint32), ("map_ids", ct.c_uint64), ("name", ct.c_char * 16),
                ("ifindex", ct.c_uint32), ("gpl_compatible", ct.c_uint32),
                ("netns_dev", ct.c_uint64), ("netns_ino", ct.c_uint64),
                ("nr_jited_ksyms", ct.c_uint32), ("nr_jited_func_lens", ct.c_uint32),
                ("jited_ksyms", ct.c_uint64), ("jited_func_lens", ct.c_uint64),
                ("btf_id", ct.c_uint32), ("func_info_rec_size", ct.c_uint32),
                ("func_info", ct.c_uint64), ("nr_func_info", ct.c_uint32),
                ("nr_line_info", ct.c_uint32), ("line_info", ct.c_uint64),
                ("jited_line_info", ct.c_uint64), ("nr_jited_line_info", ct.c_uint32),
                ("line_info_rec_size", ct.c_uint32), ("jited_line_info_rec_size", ct.c_uint32),
                ("nr_prog_tags", ct.c_uint32), ("prog_tags", ct.c_uint64),
                ("run_time_ns", ct.c_uint64), ("run_cnt", ct.c_uint64),
                ("recursion_misses", ct.c_uint64), ("verified_insns", ct.c_uint32),
                ("attach_btf_obj_id", ct.c_uint32), ("attach_btf_id", ct.c_uint32)]


def prog_info(fd: int) -> ProgInfo:
    """What the kernel says of a loaded program (its id, the verifier's instruction count)."""
    info = ProgInfo()
    _info(fd, info)
    return info


# ------------------------------------------------------------------ the loaded object
@dataclass
class LoadedObject:
    """Program and map fds by name; how it was loaded ('warm': from the cache, 'cold':
    compiled, 'off': compiled, no cache); seconds it took."""
    progs: dict[str, int]
    maps: dict[str, int]
    cache: str
    seconds: float
    _bcc: object = None                       # the bcc object of a compile, kept alive
    _fds: list[int] = field(default_factory=list)
    # what a compile adds for the cache record
    insns: dict[str, bytes] = field(default_factory=dict)
    license: str = "GPL"
    kern_version: int = 0

    def close(self) -> None:
        if self._bcc is not None:
            self._bcc.cleanup()
            self._bcc = None
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []


def load(source: Path, cflags: list[str], progs: dict[str, int]) -> LoadedObject:
    """The object compiled from source with cflags, its programs (name -> prog type)
    loaded: from the cache if it holds it, else compiled with bcc (and cached)."""
    started = time.monotonic()
    directory = cache_dir()
    path = None
    if directory is not None:
        path = directory / f"{cache_key(source.parent, cflags)}.json"
        record = _read(path)
        if record is not None:
            try:
                obj = _load_record(record, progs)
                obj.seconds = time.monotonic() - started
                return obj
            except (OSError, KeyError, ValueError, TypeError, struct.error):
                pass      # stale or damaged: compile again below and replace it
    obj = _compile(source, cflags, progs)
    if path is not None:
        try:
            _write(path, _record(obj, progs))
        except OSError:
            pass          # a read-only cache only costs the next deploy a compile
    else:
        obj.cache = "off"
    obj.seconds = time.monotonic() - started
    return obj


def _read(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if record.get("format") == FORMAT else None


def _write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def _compile(source: Path, cflags: list[str], progs: dict[str, int]) -> LoadedObject:
    from bcc import BPF   # deferred on purpose: bcc is only on root/test machines
    from bcc.libbcc import lib   # (bcc, deferred with it)

    b = BPF(src_file=str(source).encode(), cflags=cflags)
    try:
        prog_fds = {name: b.load_func(name.encode(), kind).fd for name, kind in progs.items()}
        lib.bpf_num_tables.restype = ct.c_size_t
        lib.bpf_num_tables.argtypes = [ct.c_void_p]
        lib.bpf_table_name.restype = ct.c_char_p
        lib.bpf_table_name.argtypes = [ct.c_void_p, ct.c_size_t]
        lib.bpf_table_fd_id.restype = ct.c_int
        lib.bpf_table_fd_id.argtypes = [ct.c_void_p, ct.c_size_t]
        map_fds = {lib.bpf_table_name(b.module, i).decode(): lib.bpf_table_fd_id(b.module, i)
                   for i in range(lib.bpf_num_tables(b.module))}
        return LoadedObject(prog_fds, map_fds, "cold", 0.0, _bcc=b,
                            insns={name: b.dump_func(name.encode()) for name in progs},
                            license=lib.bpf_module_license(b.module).decode(),
                            kern_version=lib.bpf_module_kern_version(b.module))
    except BaseException:
        b.cleanup()
        raise


def _record(obj: LoadedObject, progs: dict[str, int]) -> dict:
    """What a warm load needs, from a compiled object and the kernel's view of its maps."""
    fd_to_map = {fd: name for name, fd in obj.maps.items()}
    maps, btf_id = {}, 0
    for name, fd in obj.maps.items():
        info = _MapInfo()
        _info(fd, info)
        maps[name] = {"type": info.type, "key_size": info.key_size, "value_size": info.value_size,
                      "max_entries": info.max_entries, "flags": info.map_flags,
                      "btf_key": info.btf_key_type_id, "btf_value": info.btf_value_type_id,
                      "extra": info.map_extra}
        btf_id = btf_id or info.btf_id
    programs = {}
    for name, kind in progs.items():
        code = obj.insns[name]
        relocations = []
        for i in range(0, len(code) // 8):
            opcode, regs, _, imm = struct.unpack_from("=BBhi", code, i * 8)
            if opcode == LD_IMM64 and (regs >> 4) in (BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE):
                if imm not in fd_to_map:
                    raise ValueError(f"{name}: instruction {i} names fd {imm}, not a map of the object")
                relocations.append([i, fd_to_map[imm]])
        programs[name] = {"type": kind, "insns": base64.b64encode(code).decode(),
                          "maps": relocations}
    return {"format": FORMAT, "license": obj.license, "kern_version": obj.kern_version,
            "btf": base64.b64encode(_btf_blob(btf_id)).decode() if btf_id else "",
            "maps": maps, "programs": programs}


def _btf_blob(btf_id: int) -> bytes:
    fd = bpf(BPF_BTF_GET_FD_BY_ID, _GetFdById(id=btf_id))
    try:
        info = _BtfInfo()
        _info(fd, info)                     # first the size
        buf = ct.create_string_buffer(info.btf_size)
        info = _BtfInfo(btf=ct.addressof(buf), btf_size=len(buf))
        _info(fd, info)
        return buf.raw[:info.btf_size]
    finally:
        os.close(fd)


def _load_record(record: dict, progs: dict[str, int]) -> LoadedObject:
    fds: list[int] = []
    try:
        btf_fd = 0
        if record["btf"]:
            blob = ct.create_string_buffer(base64.b64decode(record["btf"]))
            btf_fd = bpf(BPF_BTF_LOAD, _BtfLoad(btf=ct.addressof(blob), btf_size=len(blob) - 1))
            fds.append(btf_fd)
        maps = {}
        for name, m in record["maps"].items():
            with_btf = btf_fd and (m["btf_key"] or m["btf_value"])
            attr = _MapCreate(map_type=m["type"], key_size=m["key_size"], value_size=m["value_size"],
                              max_entries=m["max_entries"], map_flags=m["flags"],
                              map_name=name.encode()[:BPF_OBJ_NAME_LEN - 1],
                              btf_fd=btf_fd if with_btf else 0,
                              btf_key_type_id=m["btf_key"] if with_btf else 0,
                              btf_value_type_id=m["btf_value"] if with_btf else 0,
                              map_extra=m["extra"])
            maps[name] = bpf(BPF_MAP_CREATE, attr)
            fds.append(maps[name])
        license = ct.create_string_buffer(record["license"].encode())
        prog_fds = {}
        for name, kind in progs.items():
            p = record["programs"][name]
            if p["type"] != kind:
                raise ValueError(f"{name}: cached as program type {p['type']}, wanted {kind}")
            code = bytearray(base64.b64decode(p["insns"]))
            for index, map_name in p["maps"]:
                struct.pack_into("=i", code, index * 8 + 4, maps[map_name])
            insns = (ct.c_char * len(code)).from_buffer(code)
            attr = _ProgLoad(prog_type=kind, insn_cnt=len(code) // 8, insns=ct.addressof(insns),
                             license=ct.addressof(license), kern_version=record["kern_version"],
                             prog_name=name.encode()[:BPF_OBJ_NAME_LEN - 1])
            prog_fds[name] = bpf(BPF_PROG_LOAD, attr)
            fds.append(prog_fds[name])
        if btf_fd:
            fds.remove(btf_fd)       # the maps hold the BTF now
            os.close(btf_fd)
        return LoadedObject(prog_fds, maps, "warm", 0.0, _fds=fds)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
