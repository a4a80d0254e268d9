#!/usr/bin/env bash
# Installs everything railab needs on a fresh Debian/Ubuntu machine and builds .venv.
# Idempotent: safe to run again; it only installs what is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.railab-setup-done"

if [[ $EUID -ne 0 ]]; then
    echo "setup.sh: must run as root (installs Debian packages, links kernel headers)" >&2
    exit 1
fi

APT_PACKAGES=(
    python3 python3-venv python3-pip python3-bpfcc bpfcc-tools libbpfcc
    iproute2 iputils-ping iperf3 ethtool tcpdump bpftool netsniff-ng
    clang llvm make linux-headers-amd64 procps psmisc
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    echo "setup: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# bcc compiles at load time against /lib/modules/$(uname -r)/build. Kernels without their
# own headers package get Debian's newest headers: XDP programs only use stable UAPI.
KBUILD="/lib/modules/$(uname -r)"
if [[ ! -e "$KBUILD/build/include" ]]; then
    hdr="$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -1 || true)"
    common="$(ls -d /usr/src/linux-headers-*-common 2>/dev/null | sort -V | tail -1 || true)"
    if [[ -z "$hdr" || -z "$common" ]]; then
        echo "setup: no kernel headers found under /usr/src; bcc cannot compile" >&2
        exit 1
    fi
    mkdir -p "$KBUILD"
    ln -sfn "$hdr" "$KBUILD/build"
    ln -sfn "$common" "$KBUILD/source"
    echo "setup: linked $KBUILD/build -> $hdr"
fi

# bcc's Python module comes from Debian, so the venv must see the system site-packages
# of Debian's own interpreter.
if [[ ! -x "$VENV/bin/python" ]]; then
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
if [[ ! -f "$STAMP" || "$ROOT/pyproject.toml" -nt "$STAMP" ]]; then
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -e "$ROOT[test]"
    touch "$STAMP"
fi
"$VENV/bin/python" -c "import bcc, pyroute2, scapy, yaml, jsonschema, rich" \
    || { echo "setup: python dependencies did not import" >&2; exit 1; }
echo "setup: ready ($VENV)"
