#!/usr/bin/env bash
# `make demo`: attach a throwaway network namespace with bridge + host-local,
# show what it got, DEL it, and remove everything. The plugin runs inside a
# throwaway "host" namespace of its own, so the machine's interfaces, routes
# and firewall are never touched.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" != 0 ]; then
  echo "make demo needs root: it creates network namespaces (try: sudo make demo)" >&2
  exit 1
fi
for f in bin/bridge bin/host-local; do
  [ -x "$f" ] || { echo "$f is missing: run make build" >&2; exit 1; }
done

HOST=cni-demo-host
CTR=cni-demo-ctr
DATA=$(mktemp -d /tmp/cni-demo.XXXXXX)
cleanup() {
  ip netns del "$CTR" 2>/dev/null || true
  ip netns del "$HOST" 2>/dev/null || true
  rm -rf "$DATA"
}
trap cleanup EXIT
cleanup
mkdir -p "$DATA"

ip netns add "$HOST"
ip netns add "$CTR"
ip -n "$HOST" link set lo up
ip -n "$CTR" link set lo up

# The sample config, with host-local's state in the temp dir.
CONF=$(node -e 'const c = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); c.ipam.dataDir = process.argv[2]; process.stdout.write(JSON.stringify(c))' conf/bridge-demo.conf "$DATA")

cni() { # cni COMMAND [config]: run bin/bridge in the host namespace, as a runtime would
  nsenter --net="/run/netns/$HOST" -- env -i PATH="$PATH" \
    CNI_COMMAND="$1" CNI_CONTAINERID=demo CNI_NETNS="/run/netns/$CTR" CNI_IFNAME=eth0 CNI_PATH="$PWD/bin" \
    bin/bridge <<<"${2:-$CONF}"
}
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "config (conf/bridge-demo.conf)"
echo "$CONF"

step "ADD: bin/bridge creates bridge cnidemo0, a veth pair, and gets addresses from bin/host-local"
RESULT=$(cni ADD)
echo "$RESULT"

step "what the container namespace sees"
ip -n "$CTR" addr show dev eth0
echo
ip -n "$CTR" route
ip -n "$CTR" -6 route | grep -v '^fe80' || true

GW=$(node -e 'const r = JSON.parse(process.argv[1]); process.stdout.write(r.ips[0].gateway)' "$RESULT")
step "ping the gateway $GW (the bridge's address in the host namespace)"
ip netns exec "$CTR" ping -c 2 -W 1 "$GW"

step "the host side: bridge, veth port, masquerade rules tagged with the attachment"
ip -n "$HOST" -br link show master cnidemo0
ip -n "$HOST" -br addr show dev cnidemo0
nsenter --net="/run/netns/$HOST" iptables-save -t nat | grep 'cni-ts:' || true

step "CHECK with the ADD result as prevResult"
CHECK_CONF=$(node -e 'const c = JSON.parse(process.argv[1]); c.prevResult = JSON.parse(process.argv[2]); process.stdout.write(JSON.stringify(c))' "$CONF" "$RESULT")
cni CHECK "$CHECK_CONF" && echo "CHECK: ok"

step "DEL: the veth, its addresses and rules go; the bridge stays, as with every CNI bridge"
cni DEL
ip -n "$CTR" -br link
ip -n "$HOST" -br link show type bridge
echo "masquerade rules left: $(nsenter --net="/run/netns/$HOST" iptables-save -t nat | grep -c 'cni-ts:' || true)"

step "removing the demo namespaces and $DATA"
