#!/bin/sh
# trim.sh ROOT: takes out of the image's root filesystem what nothing in the
# image runs (base.sh calls it last, from the build machine). dpkg's status
# file stays, so scanners still see which Debian packages (and versions) the
# layer came from; the copyright files stay.
set -eu
root=${1:?usage: trim.sh ROOT}

# Packages nothing here runs: logins and PAM, TLS (only krb5's plugins and
# openssl's engines use it), Berkeley DB (arpd), dpkg itself, bash (/bin/sh
# is dash), the libc's locale tools, file utilities the daemon never calls,
# Sun RPC and Kerberos (only iproute2's `ss` links them, and nothing runs ss);
# and $TRIM_EXTRA_PACKAGES (the Containerfile's: apt and its keyring).
# Their regular files and links go; directories stay (others share them).
for pkg in login libpam-modules libpam-modules-bin libpam-runtime libssl3 libdb5.3 dpkg bash libc-bin \
  diffutils findutils tar gzip hostname sysvinit-utils util-linux-extra ncurses-bin debianutils \
  init-system-helpers perl-base libtirpc3 libtirpc-common libgssapi-krb5-2 libkrb5-3 libk5crypto3 \
  libkrb5support0 libkeyutils1 libcom-err2 ${TRIM_EXTRA_PACKAGES:-}; do
  for list in "$root/var/lib/dpkg/info/$pkg.list" "$root/var/lib/dpkg/info/$pkg:"*.list; do
    [ -f "$list" ] || continue
    while IFS= read -r path; do
      case "$path" in /usr/share/doc/*/copyright) continue ;; esac
      # never a directory, nor a link to one (/bin -> usr/bin is listed by bash too)
      [ -d "$root$path" ] && continue
      if [ -L "$root$path" ] || [ -f "$root$path" ]; then rm -f "$root$path"; fi
    done < "$list"
  done
done
# perl (a dependency of nothing left), iconv modules, locales, caches, completions, checksum lists
rm -rf "$root"/usr/lib/*/perl-base "$root"/usr/share/perl5 "$root"/usr/lib/*/gconv "$root"/usr/lib/locale/* \
  "$root"/usr/share/i18n "$root"/var/cache/debconf/* "$root"/usr/share/bash-completion "$root"/usr/share/lintian \
  "$root"/var/lib/apt/lists/* "$root"/var/log/* "$root"/var/lib/dpkg/info/*.md5sums "$root"/var/lib/dpkg/info/*.symbols \
  "$root"/usr/lib/*/engines-3 \
  "$root"/usr/lib/*/ossl-modules "$root"/usr/lib/*/security

# iproute2's tools for other subsystems (devlink, RDMA, TIPC, DCB, vDPA, generic netlink, stats):
# nothing in the image runs them (the daemon and the plugins run ip and bridge).
for tool in devlink rdma tipc dcb vdpa genl rtmon nstat lnstat ctstat rtstat rtacct ifstat routel; do
  rm -f "$root/usr/bin/$tool" "$root/usr/sbin/$tool"
done

# An executable or library left needing a library that is gone is dead weight: it goes too.
# The libraries are in the multiarch directory that holds the C library (x86_64-linux-gnu,
# aarch64-linux-gnu: whatever the tree's architecture; readelf reads any).
libdir=
for d in "$root"/usr/lib/*-linux-gnu*; do if [ -e "$d/libc.so.6" ]; then libdir=$d; fi; done
[ -n "$libdir" ] || { echo "trim: no libc.so.6 in $root/usr/lib/*-linux-gnu*" >&2; exit 1; }
have() { [ -e "$libdir/$1" ] || [ -e "$root/usr/lib/$1" ] || [ -e "$root/usr/lib64/$1" ]; }
changed=1
while [ "$changed" = 1 ]; do
  changed=0
  for f in $(find "$root/usr/bin" "$root/usr/sbin" "$root/usr/lib" -type f \( -perm -u+x -o -name '*.so*' \)); do
    for lib in $(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      if ! have "$lib"; then
        echo "trim: ${f#"$root"} needs $lib, which is gone: removed" >&2
        rm -f "$f"
        changed=1
        break
      fi
    done
  done
done

# What the daemon, the plugins and iptables-wrapper run must all be there.
for bin in sh ip bridge tc nft iptables-nft iptables-legacy ip6tables-nft ip6tables-legacy xtables-nft-multi \
  xtables-legacy-multi nsenter flock sysctl ps pgrep grep wc timeout ln mv cat; do
  if [ ! -e "$root/usr/bin/$bin" ] && [ ! -e "$root/usr/sbin/$bin" ]; then echo "trim: $bin is missing" >&2; exit 1; fi
done
