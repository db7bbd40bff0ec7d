#!/usr/bin/env bash
# Builds the Debian package from the standalone executables (make standalone
# ARCH=...) with dpkg-deb: no network, no debhelper.
# Usage: packaging/deb.sh VERSION ARCH OUT.deb [BIN_DIR]
# BIN_DIR: where they are, by default where make puts them (dist/bin for
# amd64, dist/<arch>/bin for another).
set -euo pipefail
version=$1 arch=$2 out=$3
bin_dir=${4:-$([ "$arch" = amd64 ] && echo dist/bin || echo "dist/$arch/bin")}
cd "$(dirname "$0")/.."
plugins=(host-local bridge vxlan-flannel flannel)
for p in "${plugins[@]}"; do
  [ -x "$bin_dir/$p" ] || { echo "deb: $bin_dir/$p missing (run make standalone ARCH=$arch)" >&2; exit 1; }
done
# a package of one architecture holding another's executable would install and never run
case $arch in
  amd64) machine='Advanced Micro Devices X86-64' ;;
  arm64) machine=AArch64 ;;
  *) echo "deb: no standalone executable is built for $arch (amd64, arm64)" >&2; exit 1 ;;
esac
found=$(readelf -h "$bin_dir/${plugins[0]}" | sed -n 's/^ *Machine: *//p')
[ "$found" = "$machine" ] || { echo "deb: $bin_dir/${plugins[0]} is $found, not $arch's $machine" >&2; exit 1; }
# the notices of what the executables hold: beside their bin directory (dist/, dist/arm64/)
notices=$(dirname "$bin_dir")/THIRD-PARTY-NOTICES
[ -f "$notices" ] || { echo "deb: $notices missing (run make standalone ARCH=$arch)" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"
umask 022
bin=$stage/opt/cni/bin doc=$stage/usr/share/doc/cni-ts
install -d "$bin" "$doc/examples" "$stage/lib/systemd/system" "$stage/etc/default" "$stage/DEBIAN"
# One file under every name (hard links, stored once in the package).
cp "$bin_dir/${plugins[0]}" "$bin/${plugins[0]}"
chmod 0755 "$bin/${plugins[0]}"
for p in "${plugins[@]:1}"; do ln "$bin/${plugins[0]}" "$bin/$p"; done
install -m 0644 packaging/vxlan-flannel.service "$stage/lib/systemd/system/"
# 0600: where ETCD_PASSWORD (and any FLANNELD_* credential) goes; a conffile keeps its mode once edited.
install -m 0600 packaging/vxlan-flannel.default "$stage/etc/default/vxlan-flannel"
install -m 0644 packaging/host-local-repair.service packaging/host-local-repair.timer "$stage/lib/systemd/system/"
install -m 0644 packaging/host-local-repair.default "$stage/etc/default/host-local-repair"
install -m 0644 conf/* "$doc/examples/"
install -m 0644 README.md docs/*.md "$doc/"
# made by the build from what the executables bundle (packaging/notices.mjs): Node.js and each npm package, with its license
install -m 0644 "$notices" "$doc/"
printf '%s\n' 'cni-ts' '' 'License: Apache-2.0' ' On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.' '' \
  'The executables embed Node.js and bundle npm packages under their own licenses:' \
  ' /usr/share/doc/cni-ts/THIRD-PARTY-NOTICES lists each with its license text.' >"$doc/copyright"

size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" packaging/debian/control >"$stage/DEBIAN/control"
install -m 0644 packaging/debian/conffiles "$stage/DEBIAN/"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$stage/DEBIAN/"

mkdir -p "$(dirname "$out")"
dpkg-deb --root-owner-group --build "$stage" "$out" >/dev/null
echo "wrote $out"
