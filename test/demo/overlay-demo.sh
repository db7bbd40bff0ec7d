#!/usr/bin/env bash
# `make demo-overlay`: two "nodes" on this machine, each a network namespace
# on a shared underlay bridge, each running `vxlan-flannel daemon` (leases in
# the embedded file store, a temp directory both use); a pod on each attached
# through the `flannel` CNI plugin (kube-flannel's "type": "flannel": flannel
# -> bridge -> host-local), a ping from one pod to the other across the VXLAN
# overlay, then `vxlan-flannel status` and the daemon's /metrics. Everything
# it made (namespaces, daemons, the temp directory) is removed at the end,
# also when a step fails. Nothing outside its namespaces is touched.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" != 0 ]; then
  echo "make demo-overlay needs root: it creates network namespaces (try: sudo make demo-overlay)" >&2
  exit 1
fi
for f in bin/vxlan-flannel bin/flannel bin/bridge bin/host-local; do
  [ -x "$f" ] || { echo "$f is missing: run make build" >&2; exit 1; }
done
for c in ip nsenter iptables-restore ping node; do
  command -v "$c" >/dev/null || { echo "$c is missing: apt-get install iproute2 util-linux iptables iputils-ping (and Node.js 20+)" >&2; exit 1; }
done

P=ovdemo
UL=$P-ul
NODES=(n1 n2)
DATA=$(mktemp -d /tmp/cni-overlay-demo.XXXXXX)
PIDS=()
cleanup() {
  local status=$?
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  for ns in $P-p1 $P-p2 $P-n1 $P-n2 $UL; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$DATA"
  [ "$status" = 0 ] || echo "overlay demo failed (exit $status); everything it made is removed" >&2
  echo "removed: namespaces $P-*, the daemons, $DATA"
}
trap cleanup EXIT
for ns in $P-p1 $P-p2 $P-n1 $P-n2 $UL; do ip netns del "$ns" 2>/dev/null || true; done # a run killed before its cleanup

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
in_ns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" -- "$@"; }
flannel() { in_ns "$1" env -i PATH="$PATH" "$PWD/bin/vxlan-flannel" "${@:2}"; }

step "the underlay: bridge br0 in $UL, nodes $P-n1 (192.168.250.1) and $P-n2 (192.168.250.2) on it"
ip netns add "$UL"
ip -n "$UL" link add br0 type bridge
ip -n "$UL" link set br0 up
octet=0
for n in "${NODES[@]}"; do
  octet=$((octet + 1))
  ip netns add "$P-$n"
  ip link add eth0 netns "$P-$n" type veth peer name "$P$n" netns "$UL"
  ip -n "$UL" link set "$P$n" master br0 up
  ip -n "$P-$n" addr add "192.168.250.$octet/24" dev eth0
  ip -n "$P-$n" link set eth0 up
  ip -n "$P-$n" link set lo up
  in_ns "$P-$n" sysctl -q -w net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
  mkdir -p "$DATA/$n"
done
ip -n "$P-n1" -br addr show dev eth0

step "the network config, in flannel's schema, in the file store both daemons share ($DATA/leases)"
flannel "$P-n1" network set --network 10.250.0.0/16 --lease-dir "$DATA/leases"

step "vxlan-flannel daemon on each node (flanneld's flags; /healthz, /readyz and /metrics on 127.0.0.1:8471)"
for n in "${NODES[@]}"; do
  # nsenter and env exec the daemon: $! is its pid (a shell function here would put a subshell in between)
  nsenter --net="/run/netns/$P-$n" -- env -i PATH="$PATH" "$PWD/bin/vxlan-flannel" daemon --iface eth0 --lease-dir "$DATA/leases" \
    --subnet-file "$DATA/$n/subnet.env" --cni-data-dir "$DATA/$n/cni" --healthz-ip 127.0.0.1 --healthz-port 8471 \
    >"$DATA/$n/daemon.log" 2>&1 &
  PIDS+=($!)
done
echo "daemon pids: ${PIDS[*]}"
for n in "${NODES[@]}"; do
  for _ in $(seq 150); do [ -s "$DATA/$n/subnet.env" ] && break; sleep 0.2; done
  [ -s "$DATA/$n/subnet.env" ] || { echo "the daemon on $n did not write subnet.env:" >&2; cat "$DATA/$n/daemon.log" >&2; exit 1; }
  echo "-- $n: $DATA/$n/subnet.env"
  cat "$DATA/$n/subnet.env"
done
echo "-- n1's log"
cat "$DATA/n1/daemon.log"

step "a pod on each node, through the flannel plugin (flannel -> bridge -> host-local, one process)"
declare -A POD_IP
for n in "${NODES[@]}"; do
  pod=$P-p${n#n}
  ip netns add "$pod"
  conf=$(printf '{"cniVersion":"1.0.0","name":"ovdemo","type":"flannel","subnetFile":"%s","dataDir":"%s","delegate":{"bridge":"ovdemo0"},"ipam":{"dataDir":"%s"}}' \
    "$DATA/$n/subnet.env" "$DATA/$n/cni" "$DATA/$n/ipam")
  result=$(in_ns "$P-$n" env -i PATH="$PATH" CNI_COMMAND=ADD CNI_CONTAINERID="demo-$n" CNI_NETNS="/run/netns/$pod" CNI_IFNAME=eth0 \
    CNI_PATH="$PWD/bin" "$PWD/bin/flannel" <<<"$conf")
  POD_IP[$n]=$(node -e 'process.stdout.write(JSON.parse(process.argv[1]).ips[0].address.split("/")[0])' "$result")
  echo "$pod on $n: ${POD_IP[$n]}"
done
[ "${OVERLAY_DEMO_FAIL:-}" != pods ] || { echo "failing on purpose (OVERLAY_DEMO_FAIL=pods)" >&2; exit 1; }

step "each node has programmed the other: neighbour, FDB entry and route on flannel.1"
for _ in $(seq 100); do
  [ "$(ip -n "$P-n1" route show dev flannel.1 | wc -l)" -ge 1 ] && [ "$(ip -n "$P-n2" route show dev flannel.1 | wc -l)" -ge 1 ] && break
  sleep 0.1
done
ip -n "$P-n1" route show dev flannel.1
ip -n "$P-n1" neigh show dev flannel.1
bridge -n "$P-n1" fdb show dev flannel.1 | grep dst

step "ping from $P-p1 (${POD_IP[n1]}, on n1) to $P-p2 (${POD_IP[n2]}, on n2): across the VXLAN overlay"
ip netns exec "$P-p1" ping -c 3 -W 2 "${POD_IP[n2]}"

step "vxlan-flannel status on n1, without flags: it reads the flags of the daemon running there"
flannel "$P-n1" status

step "the daemon's /metrics on n1 (Prometheus text; a few of its series)"
in_ns "$P-n1" node -e 'fetch("http://127.0.0.1:8471/metrics").then((r) => r.text()).then((t) => {
  console.log(t.split("\n").filter((l) => /^flannel_(peers|reconcile_passes_total|lease_renewals_total|pod_addresses)\b|^process_resident_memory_bytes /.test(l)).join("\n"));
})'

step "DEL of both pods through the plugin"
for n in "${NODES[@]}"; do
  conf=$(printf '{"cniVersion":"1.0.0","name":"ovdemo","type":"flannel","dataDir":"%s"}' "$DATA/$n/cni")
  in_ns "$P-$n" env -i PATH="$PATH" CNI_COMMAND=DEL CNI_CONTAINERID="demo-$n" CNI_NETNS="/run/netns/$P-p${n#n}" CNI_IFNAME=eth0 \
    CNI_PATH="$PWD/bin" "$PWD/bin/flannel" <<<"$conf"
  echo "$n: DEL ok"
done

step "stopping the daemons and removing everything"
