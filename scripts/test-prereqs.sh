#!/usr/bin/env bash
# The Debian packages the test suite runs against, installed when missing.
# `make test` runs this first. As root it installs what is missing (one
# apt-get update + install, nothing when everything is there); otherwise it
# prints the one command to run and fails.
#
# What each is for: the Go reference plugins (interop, chaining, side-by-side
# benchmarks), the kernel tools, etcd (flannel's lease store), Go + Debian's
# libcni (the suite's own libcni driver, test/libcni-driver), systemd-analyze
# (the package's units), GNU time (the benchmarks' memory figures), containerd
# + runc + a static busybox (a real runtime over CRI), openssl (the stand-in
# API server's test CA), dpkg-dev (the package), kubectl (proves the stand-in
# API server), mmdebstrap + binutils (readelf) to build the image (`make
# image`) and podman to run it as a kubelet would.
#
# arm64 (the suite builds and smoke-tests the arm64 executables, package and
# image on this amd64 machine): qemu-user-static runs arm64 programs, through
# the kernel's binfmt_misc handler this script registers (below); the arm64
# C and C++ runtime (libc6:arm64, libstdc++6:arm64, with Debian's arm64
# architecture added to dpkg) is what the arm64 Node links; binutils'
# aarch64 strip strips it; arch-test lets mmdebstrap build an arm64 tree.
set -euo pipefail

FOREIGN=arm64
PACKAGES=(
  containernetworking-plugins iproute2 util-linux procps iptables nftables iputils-ping
  etcd-server etcd-client golang-go golang-github-appc-cni-dev systemd time
  containerd runc busybox-static openssl dpkg-dev mmdebstrap binutils podman
  qemu-user-static arch-test binutils-aarch64-linux-gnu "libc6:$FOREIGN" "libstdc++6:$FOREIGN"
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$p")
done
# Debian's kubernetes-client conflicts with a kubectl installed otherwise (the
# Cloud SDK's, a downloaded binary): any kubectl on the PATH will do.
command -v kubectl >/dev/null || missing+=(kubernetes-client)
foreign=$(dpkg --print-foreign-architectures | grep -qx "$FOREIGN" && echo yes || echo no)

# binfmt_misc: the kernel runs an aarch64 ELF through qemu-aarch64-static. The
# line is Debian's own (/usr/lib/binfmt.d/qemu-aarch64.conf, what systemd-binfmt
# registers at boot on a machine that runs systemd); its F flag opens the
# interpreter once, here, so it also runs inside containers and chroots (the
# image under podman, mmdebstrap's arm64 tree), which do not hold it.
BINFMT_CONF=/usr/lib/binfmt.d/qemu-aarch64.conf
BINFMT_DIR=/proc/sys/fs/binfmt_misc
binfmt_registered() { [ -f "$BINFMT_DIR/qemu-aarch64" ] && grep -qx enabled "$BINFMT_DIR/qemu-aarch64"; }

if [ ${#missing[@]} -eq 0 ] && [ "$foreign" = yes ] && binfmt_registered; then exit 0; fi

cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
[ "$foreign" = yes ] || cmd="dpkg --add-architecture $FOREIGN && $cmd"
if [ "$(id -u)" -ne 0 ]; then
  echo "test prerequisites missing; as root, run:" >&2
  echo "  $cmd" >&2
  binfmt_registered || echo "  then register qemu-aarch64 with binfmt_misc: grep -v '^#' $BINFMT_CONF >$BINFMT_DIR/register" >&2
  exit 1
fi
if [ "$foreign" = no ]; then
  echo "adding Debian's $FOREIGN architecture to dpkg (for libc6:$FOREIGN, libstdc++6:$FOREIGN)" >&2
  dpkg --add-architecture "$FOREIGN"
fi
if [ ${#missing[@]} -gt 0 ] || [ "$foreign" = no ]; then
  echo "installing test prerequisites: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  [ ${#missing[@]} -eq 0 ] || apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! binfmt_registered; then
  [ -f "$BINFMT_DIR/register" ] || mount -t binfmt_misc binfmt_misc "$BINFMT_DIR"
  if [ -e "$BINFMT_DIR/qemu-aarch64" ]; then
    # registered but disabled: enable it as it is (whoever registered it chose its flags)
    echo 1 >"$BINFMT_DIR/qemu-aarch64"
  else
    # the line's own name (qemu-aarch64) makes a second registration fail rather than add a duplicate
    grep -v '^#' "$BINFMT_CONF" | grep . >"$BINFMT_DIR/register"
  fi
  echo "registered qemu-aarch64 with binfmt_misc ($BINFMT_CONF)" >&2
fi
binfmt_registered || { echo "binfmt_misc: qemu-aarch64 is still not enabled" >&2; exit 1; }
