#!/usr/bin/env bash
# The image's Debian layer: what the daemon and the plugins run (iproute2,
# iptables in both variants behind iptables-wrapper, nftables, util-linux's
# nsenter, procps, the C++ runtime of the executable), from Debian's mirror
# with mmdebstrap, no container engine. Written as a root filesystem tarball
# to $1 (--format=tar: make names it .tmp until it is whole, and mmdebstrap
# would take a name not ending in .tar for a directory), for the Debian
# architecture $2 (this machine's by default; another one's maintainer
# scripts run through qemu-user's binfmt_misc handler, which mmdebstrap
# checks with arch-test). Nothing in it is run at build time but Debian's own
# maintainer scripts inside the chroot.
#
# Small: essential packages only (no apt), merged /usr set up without the
# usrmerge package (which pulls in perl), no documentation but the copyright
# files, and what nothing in the image runs removed afterwards (trim.sh).
set -euo pipefail
out=${1:?usage: base.sh OUT.tar [ARCH]}
arch=${2:-$(dpkg --print-architecture)}
here=$(cd "$(dirname "$0")" && pwd)
suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# a fixed date: the same inputs give the same layer (and digest)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}

mmdebstrap --quiet --variant=essential --mode=root --format=tar --skip=output/dev --architectures="$arch" \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --include=iproute2,iptables,nftables,procps,libstdc++6 \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook="upload '$here/iptables-wrapper' /usr/sbin/iptables-wrapper" \
  --customize-hook='chmod 0755 "$1/usr/sbin/iptables-wrapper"' \
  --customize-hook='for n in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do ln -sf iptables-wrapper "$1/usr/sbin/$n"; done' \
  --customize-hook='test -x "$1/usr/sbin/iptables-legacy" && test -x "$1/usr/sbin/iptables-nft" && test -x "$1/usr/sbin/nft" && test -x "$1/usr/bin/nsenter"' \
  --customize-hook="sh '$here/trim.sh' \"\$1\"" \
  "$suite" "$out" "$mirror"
