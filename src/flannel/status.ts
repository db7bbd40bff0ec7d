// `vxlan-flannel status`: this node's lease and VTEP, and for every peer
// whether its neighbour, FDB entry and route are in place.
import { readIfExists } from '../util/fs';
import type { LinkState } from '../iproute/vxlan';
import { isPermanent } from '../iproute/neigh';
import { Prefix } from '../net/ip';
import { parseNetworkConfig } from './netconfig';
import { desiredPeers, readActual } from './peers';
import type { LeaseStore } from './store';
import { parseSubnetEnv } from './subnet-env';
import { getLink, vtepName } from './vtep';

export interface PeerStatus {
  subnet: string;
  publicIP: string;
  vtepMAC: string;
  neigh: boolean;
  fdb: boolean;
  route: boolean;
}

export interface StatusReport {
  store: string;
  network?: { network: string; subnetLen: number; vni: number; port: number };
  lease?: { subnet: string; publicIP?: string; vtepMAC?: string; inStore: boolean };
  vtep?: { name: string; present: boolean; up?: boolean; mtu?: number; mac?: string; address?: boolean };
  peers: PeerStatus[];
  ignored: string[];
  problems: string[];
}

export async function collectStatus(store: LeaseStore, subnetFile: string, netns?: string): Promise<StatusReport> {
  const report: StatusReport = { store: store.description, peers: [], ignored: [], problems: [] };
  const cfgText = await store.getConfig();
  if (cfgText === undefined) {
    report.problems.push('no network config in the store');
    return report;
  }
  const cfg = parseNetworkConfig(cfgText);
  report.network = { network: cfg.network.toString(), subnetLen: cfg.subnetLen, vni: cfg.vni, port: cfg.port };
  const envText = readIfExists(subnetFile);
  const env = envText === undefined ? undefined : parseSubnetEnv(envText);
  if (!env?.subnet) {
    report.problems.push(`${subnetFile} ${envText === undefined ? 'does not exist' : 'has no FLANNEL_SUBNET'}: this node holds no lease`);
    return report;
  }
  const subnet = env.subnet;
  const { leases } = await store.list();
  const own = leases.find((l) => l.subnet.toString() === subnet.toString());
  report.lease = {
    subnet: subnet.toString(),
    inStore: !!own,
    ...(own ? { publicIP: own.attrs.publicIP.toString(), ...(own.attrs.vtepMAC ? { vtepMAC: own.attrs.vtepMAC } : {}) } : {}),
  };
  if (!own) report.problems.push(`lease ${subnet} is not in the store`);

  const name = vtepName(cfg.vni);
  const link: LinkState | undefined = await getLink(name, netns);
  const want = `${subnet.network}`;
  report.vtep = { name, present: !!link };
  if (!link) {
    report.problems.push(`VTEP ${name} does not exist`);
    return report;
  }
  const hasAddr = link.addrs.some((a) => a.family === 'inet' && a.local === want && a.prefixlen === 32);
  report.vtep = { name, present: true, up: link.up, mtu: link.mtu, mac: link.mac, address: hasAddr };
  if (!link.up) report.problems.push(`VTEP ${name} is down`);
  if (!hasAddr) report.problems.push(`VTEP ${name} lacks ${want}/32`);
  if (own?.attrs.vtepMAC && own.attrs.vtepMAC !== link.mac) report.problems.push(`VTEP MAC ${link.mac} is not the lease's VtepMAC ${own.attrs.vtepMAC}`);

  const self = { subnet: Prefix.of(subnet.network, subnet.length), publicIP: own?.attrs.publicIP, vni: cfg.vni };
  const { peers, skipped } = desiredPeers(leases, self, cfg.network);
  report.ignored = skipped;
  const actual = await readActual(name, netns);
  for (const p of peers) {
    const n = actual.neigh.find((e) => e.dst === p.vtepIP);
    const f = actual.fdb.filter((e) => e.mac.toLowerCase() === p.mac && e.dst);
    const r = actual.routes.find((e) => e.dst === p.subnet.toString());
    const st: PeerStatus = {
      subnet: p.subnet.toString(),
      publicIP: p.publicIP,
      vtepMAC: p.mac,
      neigh: !!n && isPermanent(n) && n.lladdr?.toLowerCase() === p.mac,
      fdb: f.length === 1 && f[0].dst === p.publicIP,
      route: !!r && r.gateway === p.vtepIP && !!r.flags?.includes('onlink'),
    };
    for (const k of ['neigh', 'fdb', 'route'] as const) if (!st[k]) report.problems.push(`peer ${st.subnet}: ${k} missing or wrong`);
    report.peers.push(st);
  }
  return report;
}

export function formatStatus(r: StatusReport): string {
  const lines: string[] = [`store:   ${r.store}`];
  if (r.network) lines.push(`network: ${r.network.network} (/${r.network.subnetLen} per node, VNI ${r.network.vni}, port ${r.network.port})`);
  if (r.lease) {
    lines.push(
      `lease:   ${r.lease.subnet}${r.lease.inStore ? `  public ${r.lease.publicIP}  VtepMAC ${r.lease.vtepMAC ?? '-'}` : '  (not in the store)'}`,
    );
  }
  if (r.vtep) {
    lines.push(
      r.vtep.present
        ? `VTEP:    ${r.vtep.name} ${r.vtep.up ? 'up' : 'DOWN'}, MTU ${r.vtep.mtu}, MAC ${r.vtep.mac}, address ${r.vtep.address ? 'ok' : 'MISSING'}`
        : `VTEP:    ${r.vtep.name} MISSING`,
    );
  }
  if (r.peers.length) {
    lines.push('peers:');
    const rows = [['SUBNET', 'PUBLIC IP', 'VTEP MAC', 'NEIGH', 'FDB', 'ROUTE']];
    const ok = (b: boolean) => (b ? 'ok' : 'MISSING');
    for (const p of r.peers) rows.push([p.subnet, p.publicIP, p.vtepMAC, ok(p.neigh), ok(p.fdb), ok(p.route)]);
    const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)));
    for (const row of rows) lines.push('  ' + row.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd());
  } else if (r.lease) {
    lines.push('peers:   none');
  }
  for (const s of r.ignored) lines.push(`ignored: ${s}`);
  for (const p of r.problems) lines.push(`problem: ${p}`);
  lines.push(r.problems.length ? `state:   DEGRADED (${r.problems.length} problem${r.problems.length > 1 ? 's' : ''})` : 'state:   ok');
  return lines.join('\n') + '\n';
}
