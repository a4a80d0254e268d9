#!/usr/bin/env bash
# containerlab and railab's node and switch images, for `railab deploy --runtime containerlab`.
# Both are optional: without Go or Docker this says what is missing and returns 0, and the
# netns runtime works as before. Idempotent.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The newest containerlab release whose go.mod this machine's Go accepts (v0.79 needs go 1.26,
# v0.78 go 1.25), newest first.
CLAB_VERSIONS=(v0.79.0 v0.78.0)
export PATH="$PATH:/usr/local/go/bin"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

build_containerlab() {
    local v=$1 dir
    # `go install pkg@version` first lists the module's versions to look for a deprecation
    # notice, and the proxy here refuses that listing; the version itself is served. So:
    # fetch that one version into the module cache and build it from there.
    dir="$(go mod download -json "github.com/srl-labs/containerlab@$v" 2>/dev/null \
        | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')" || return 1
    [[ -n "$dir" ]] || return 1
    # containerlab refuses to deploy on a kernel built without module support (no
    # /proc/modules: it fails before looking at modules.builtin). Such a kernel has every
    # feature built in, so the build edits one check in a copy of the source: a missing
    # /proc/modules reads as "nothing loaded as a module" and the built-in check decides.
    local work src=utils/kernel_module.go
    work="$(mktemp -d)"
    cp -r "$dir/." "$work/" && chmod -R u+w "$work"
    perl -0pi -e 's{(os\.Open\("/proc/modules"\)\n\tif err != nil \{\n)}{$1\t\tif os.IsNotExist(err) {\n\t\t\treturn false, nil\n\t\t}\n}' \
        "$work/$src"
    cmp -s "$dir/$src" "$work/$src" && \
        echo "setup: containerlab $v: the /proc/modules check is not where expected; built unchanged"
    (cd "$work" && CGO_ENABLED=0 go build -trimpath -o /usr/local/bin/containerlab \
        -ldflags "-s -w -X github.com/srl-labs/containerlab/cmd.Version=${v#v}" .)
    local rc=$?
    rm -rf "$work"
    return $rc
}

if ! command -v containerlab >/dev/null 2>&1; then
    if command -v go >/dev/null 2>&1; then
        for v in "${CLAB_VERSIONS[@]}"; do
            echo "setup: building containerlab $v with Go (about 3 minutes, once)"
            if build_containerlab "$v" >/tmp/railab-clab-build.log 2>&1; then
                break
            fi
            echo "setup: containerlab $v did not build: $(tail -1 /tmp/railab-clab-build.log)"
        done
    else
        echo "setup: no Go toolchain: containerlab not installed (--runtime containerlab unavailable)"
    fi
fi

if ! command -v docker >/dev/null 2>&1 || ! timeout 20 docker info >/dev/null 2>&1; then
    echo "setup: Docker is not running: railab's node image not built (--runtime containerlab unavailable)"
    exit 0
fi

VERSION="$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -1)"
# railab-node: every node of `railab deploy --runtime containerlab`, and the hosts of a lab
# that containerlab deploys itself; railab-switch: the switches of such a lab (`railab topo
# images` writes both into a containerlab file, `railab attach` finds them by image). One
# root filesystem for both: railab configures and drives every node from the host through
# its namespace, so a container only has to keep its namespace alive; the switch image's
# own name is what tells a containerlab file (and `containerlab inspect`) which nodes are
# railab's XDP switches.
IMAGES=("railab-node:$VERSION" "railab-switch:$VERSION")
missing_images=()
for image in "${IMAGES[@]}"; do
    docker image inspect "$image" >/dev/null 2>&1 || missing_images+=("$image")
done
if ((${#missing_images[@]})); then
    BUSYBOX=/bin/busybox
    [[ -x $BUSYBOX ]] && file -L "$BUSYBOX" 2>/dev/null | grep -q dynamically && BUSYBOX=""
    [[ -x /usr/bin/busybox ]] && BUSYBOX=/usr/bin/busybox
    if [[ -z "$BUSYBOX" ]]; then
        echo "setup: busybox-static is not installed: cannot build ${missing_images[*]}" >&2
        exit 1
    fi
    # A root filesystem of one static busybox (from Debian's busybox-static).
    rootfs="$(mktemp -d)"
    trap 'rm -rf "$rootfs"' EXIT
    mkdir -p "$rootfs/bin" "$rootfs/tmp" "$rootfs/proc" "$rootfs/sys" "$rootfs/dev" "$rootfs/etc"
    cp "$BUSYBOX" "$rootfs/bin/busybox"
    for applet in sh sleep ip ping cat ls ps; do ln -s busybox "$rootfs/bin/$applet"; done
    for image in "${missing_images[@]}"; do
        title="${image%%:*}"
        echo "setup: building $image (docker import of a busybox-static root filesystem)"
        tar -C "$rootfs" -c . | docker import \
            --change 'ENTRYPOINT ["/bin/sh", "-c", "trap \"exit 0\" TERM INT; while :; do sleep 3600 & wait $!; done"]' \
            --change "LABEL org.opencontainers.image.title=$title org.opencontainers.image.version=$VERSION" \
            - "$image" >/dev/null
    done
fi
echo "setup: containerlab $(containerlab version 2>/dev/null | sed -n 's/ *version: *//p' | head -1), images ${IMAGES[*]}"
