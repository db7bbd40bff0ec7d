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
set -euo pipefail

PACKAGES=(
  containernetworking-plugins iproute2 util-linux procps iptables nftables iputils-ping
  etcd-server etcd-client golang-go golang-github-appc-cni-dev systemd time
  containerd runc busybox-static openssl dpkg-dev mmdebstrap binutils podman
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$p")
done
# Debian's kubernetes-client conflicts with a kubectl installed otherwise (the
# Cloud SDK's, a downloaded binary): any kubectl on the PATH will do.
command -v kubectl >/dev/null || missing+=(kubernetes-client)

[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "test prerequisites missing; as root, run:" >&2
  echo "  $cmd" >&2
  exit 1
fi
echo "installing test prerequisites: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
