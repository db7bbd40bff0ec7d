// Bench "cluster scale": one node's `vxlan-flannel daemon` at 1,000 and 5,000 peers, as Kubernetes
// Nodes (the stand-in API server; vxlan and host-gw) and as leases in etcd and the file store (IPv4,
// IPv6-only and dual-stack networks). What each run measures: lib/cluster.mjs.
//
//   node test/bench/cluster-scale.mjs     (root; SCALE_NODES=1000,5000 SCALE_REPEAT=5 SCALE_STORE=kube,kube-host-gw,etcd,file)
//   SCALE_STORE=kube-host-gw: the Kubernetes part on the host-gw backend (no VtepMAC change)
//   SCALE_STARTS=3: daemon starts (kube) whose median is "all peers programmed", beside the median of as many floors
//   SCALE_FAMILIES=ipv4,ipv6,dual: the stores' networks
//   SCALE_DAEMON, SCALE_LOG, SCALE_NODE_ARGS, SCALE_PERIOD: see lib/cluster.mjs
// With BENCH_RESULTS=<dir> (make bench sets it) the rows are also written to <dir>/cluster-scale.json
// for the footprint section.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { table } from './lib.mjs';
import { daemonPath, runConfig } from './lib/cluster.mjs';

const SIZES = (process.env.SCALE_NODES ?? '1000,5000').split(',').map(Number);
const STORES = (process.env.SCALE_STORE ?? 'kube,kube-host-gw,etcd,file').split(',');
const FAMILIES = (process.env.SCALE_FAMILIES ?? 'ipv4,ipv6,dual').split(',');
const REPEAT = Number(process.env.SCALE_REPEAT ?? 5);

if (process.getuid() !== 0) {
  console.error('cluster-scale: needs root (network namespaces)');
  process.exit(1);
}
const rows = [];
// the stores run once per family, the Kubernetes benches with IPv4 Nodes
const runs = STORES.flatMap((store) => (store.startsWith('kube') ? ['ipv4'] : FAMILIES).flatMap((fam) => SIZES.map((n) => ({ store, fam, n }))));
for (const config of runs) {
  const r = runConfig(config);
  rows.push(r);
  console.error(JSON.stringify(r));
}
if (process.env.BENCH_RESULTS) writeFileSync(join(process.env.BENCH_RESULTS, 'cluster-scale.json'), JSON.stringify(rows));

const s = (ms) => (!Number.isFinite(ms) ? 'never' : ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(0)} ms`);
const lat = (c) => (c?.latencyMs !== undefined ? `, ${c.latencyMs.toFixed(1)} ms in the daemon` : '');
const ch = (c) => (c ? `${s(c.ms)} (${Number.isFinite(c.cpuMs) ? c.cpuMs.toFixed(0) : '?'} ms CPU${lat(c)})` : '-');
const rss = (r) => `${r.rssStart.toFixed(0)}→${r.rssEnd.toFixed(0)} MiB (peak ${r.rssPeak?.toFixed(0)}; anonymous ${r.idle.rss.anon.toFixed(0)}, file ${r.idle.rss.file.toFixed(0)}; children ${r.idle.children.count}: ${r.idle.children.pss.toFixed(1)} MiB PSS)`;
const idle = (r) => `${r.idle.idleCpu.toFixed(2)}% (quiet ${r.idle.quietCpu.toFixed(2)}%, a full pass every ${r.idle.period} s)`;
const fullPass = (r) => (r.idle.fullPass ? `${s(r.idle.fullPass.ms)} (${r.idle.fullPass.cpuMs.toFixed(0)} ms CPU)` : '-');
const drift = (r) => (r.drift ? ['route', 'neigh', 'fdb'].filter((k) => k in r.drift).map((k) => `${k} ${s(r.drift[k])}`).join(', ') : '-');
console.log(
  `\ncluster scale (${daemonPath()}): one daemon, N peers; medians of ${REPEAT} changes each (wall from the write until the kernel shows it; ` +
    'daemon CPU in the changes passes; the daemon\'s own latency from the event reaching it); idle CPU: a quiet window plus one full pass per period',
);
const kube = rows.filter((r) => r.store.startsWith('kube'));
if (kube.length) {
  table([
    ['N Nodes', 'all peers programmed', 'kernel floor', 'ratio', 'VtepMAC changed', 'PublicIP changed', 'podCIDR changed', 'annotations removed', 'deleted', '100 created', 'CPU/new Node', '100 deleted', 'RSS', 'heartbeats (CPU)', 'idle CPU', 'full pass', 'drift repaired'],
    ...kube.map((r) => [
      `${r.n}${r.store === 'kube' ? '' : ' host-gw'}`, s(r.start), s(r.floor), `${(r.start / r.floor).toFixed(1)}x`, ch(r.mac), ch(r.ip), ch(r.cidr), ch(r.unannotated), ch(r.deleted),
      s(r.created), `${r.cpuPerNew.toFixed(1)} ms`, s(r.deleted100), rss(r), `${r.heartbeatCpu.toFixed(1)}% of a core${r.heartbeatFloorCpu === undefined ? '' : ` (a bare Node watching: ${r.heartbeatFloorCpu.toFixed(1)}%)`}${r.heartbeatCatchUpMs === undefined ? '' : `, caught up ${r.heartbeatCatchUpMs.toFixed(0)} ms after the last`}`, idle(r), fullPass(r), drift(r),
    ]),
  ]);
}
const stores = rows.filter((r) => r.store === 'etcd' || r.store === 'file');
if (stores.length) {
  console.log('\netcd and file store: N leases of an IPv4, IPv6-only or dual-stack network (times from the daemon\'s start; dual stack: both VTEPs, both floors)');
  table([
    ['store', 'family', 'N leases', 'own lease chosen+written', 'all peers programmed', 'kernel floor', 'goal (3x floor + 1 s)', 'VtepMAC changed', '100 created', '100 deleted', 'RSS', 'idle CPU', 'full pass', 'drift repaired'],
    ...stores.map((r) => [r.store, r.fam, r.n, s(r.leased), s(r.start), s(r.floor), s(3 * r.floor + 1000), ch(r.mac), s(r.created), s(r.deleted100), rss(r), idle(r), fullPass(r), drift(r)]),
  ]);
}
