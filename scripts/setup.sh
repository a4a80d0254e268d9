#!/usr/bin/env bash
# Installs everything railab needs on a fresh Debian 12 machine and builds .venv.
# Idempotent: safe to run again; it only installs what is missing.
# --core: everything but containerlab and the node image (what the netns runtime and
# `make demo` need; containerlab's build takes minutes on a fresh machine).
#
# Python libraries come from Debian's packages, not PyPI (the project's machines reach
# Debian's archive and the Go module proxy, nothing else). The venv sees them through
# --system-site-packages, and railab itself is installed into it without network.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.railab-setup-done"

CORE_ONLY=0
[[ "${1:-}" == "--core" ]] && CORE_ONLY=1

if [[ $EUID -ne 0 ]]; then
    echo "setup.sh: must run as root (installs Debian packages, links kernel headers)" >&2
    exit 1
fi

APT_PACKAGES=(
    # interpreter and the libraries railab imports
    python3 python3-venv python3-pip python3-setuptools python3-wheel
    python3-bpfcc python3-pyroute2 python3-scapy python3-yaml python3-jsonschema
    python3-rich python3-matplotlib
    # railab ui: web server, and the browser its test drives (headless)
    python3-aiohttp chromium chromium-driver python3-selenium
    # test runner and plugins
    python3-pytest python3-hypothesis python3-pytest-timeout python3-pytest-rerunfailures
    # the documentation site (`make docs`; `mkdocs build --strict` runs in `make check`/`make test`)
    mkdocs mkdocs-material
    # bcc and what it compiles with
    bpfcc-tools libbpfcc clang llvm linux-headers-amd64
    # the native send engine (native/engine: C with zlib's crc32)
    gcc libc6-dev zlib1g-dev
    # tools the data-plane tests and benchmarks drive
    iproute2 iputils-ping iperf3 ethtool tcpdump bpftool netsniff-ng procps psmisc make
    # railab's container node image is built from this static binary
    busybox-static
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    echo "setup: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
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

# bcc and every other library come from Debian, so the venv must be made by Debian's own
# interpreter (not one on PATH, e.g. pyenv's) and see its site-packages.
if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c "import bcc" 2>/dev/null; then
    rm -rf "$VENV"
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
if [[ ! -f "$STAMP" || "$ROOT/pyproject.toml" -nt "$STAMP" ]]; then
    # No network: Debian's setuptools builds the editable install, no dependency is fetched.
    "$VENV/bin/pip" install -q --no-deps --no-build-isolation --no-index -e "$ROOT"
    touch "$STAMP"
fi

if ((CORE_ONLY)); then
    echo "setup: --core: containerlab and the node image left out (make setup builds them)"
else
    bash "$ROOT/scripts/setup-containerlab.sh"
fi

"$VENV/bin/python" - <<'EOF' || { echo "setup: python dependencies are missing or too old" >&2; exit 1; }
from importlib.metadata import version
import bcc, pyroute2, scapy, yaml, jsonschema, rich, matplotlib, pytest, hypothesis, aiohttp, selenium  # noqa: F401
from yaml import CSafeLoader  # noqa: F401  (libyaml: the pure-Python loader is 10x slower)
import dataplane.cli.main  # noqa: F401
EOF
# The XDP object for the shipped labs' sizes, compiled now into railab's cache (keyed by
# the sources, sizes, kernel and bcc), so that the first deploy loads it instead of
# spending seconds in clang. Needs root (it loads the object to record it).
if [[ $EUID -eq 0 ]]; then
    "$VENV/bin/python" -m dataplane.agent.prebuild | sed 's/^/setup: /' \
        || echo "setup: could not prebuild the XDP object; the first deploy will compile it" >&2
fi
# The native send engine (native/engine), compiled now into its cache (keyed by the
# sources and gcc's version), so that the first run does not wait for gcc.
"$VENV/bin/python" -m dataplane.nic.engine | sed 's/^/setup: send engine: /' \
    || echo "setup: could not build the send engine; the first run will try again" >&2
echo "setup: ready ($VENV)"
