#!/usr/bin/env bash
# Builds the Debian package from dist/bin (make standalone) with dpkg-deb: no
# network, no debhelper. Usage: packaging/deb.sh VERSION ARCH OUT.deb
set -euo pipefail
version=$1 arch=$2 out=$3
cd "$(dirname "$0")/.."
plugins=(host-local bridge vxlan-flannel flannel)
for p in "${plugins[@]}"; do
  [ -x "dist/bin/$p" ] || { echo "deb: dist/bin/$p missing (run make standalone)" >&2; exit 1; }
done
[ -f dist/THIRD-PARTY-NOTICES ] || { echo "deb: dist/THIRD-PARTY-NOTICES missing (run make standalone)" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"
umask 022
bin=$stage/opt/cni/bin doc=$stage/usr/share/doc/cni-ts
install -d "$bin" "$doc/examples" "$stage/lib/systemd/system" "$stage/etc/default" "$stage/DEBIAN"
# One file under every name (hard links, stored once in the package).
cp "dist/bin/${plugins[0]}" "$bin/${plugins[0]}"
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
install -m 0644 dist/THIRD-PARTY-NOTICES "$doc/"
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
