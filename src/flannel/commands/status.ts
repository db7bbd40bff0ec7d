// `vxlan-flannel status`: this node's lease and VTEPs, and for every peer
// whether its neighbour, FDB entry and route are in place (IPv4 peers on
// flannel.<VNI>, IPv6 peers on flannel-v6.<VNI>); with DirectRouting, a peer
// on the VTEP's underlay subnets needs only its route via its public address.
// With host-gw there is no VTEP: each peer is shown with its route (via its
// public address, and the device the kernel has it on).
import { readIfExists } from '../../util/fs';
import { formatTable } from '../../util/table';
import { isPermanent } from '../../iproute/neigh';
import { IP, Prefix } from '../../net/ip';
import { LeaseSubnets, describeSubnets, leaseKey, subnetOf } from '../lease';
import { parseNetworkConfig } from '../netconfig';
import { Actual, Peer, isDirectPeer, readActual } from '../backend/vxlan/peers';
import { desiredPeers } from '../backend/vxlan/peer-index';
import type { LeaseList } from '../manager';
import { parseSubnetEnv, subnetsOf } from '../subnet-env';
import { vtep6Name, vtepName } from '../backend/vxlan/vtep';
import { getLink, isUp, linkMac, listLinks, type IpLink } from '../../iproute/link';
import { vxlanAttrs } from '../../iproute/vxlan';
import { allAddresses, connectedSubnets } from '../daemon/underlay';
import { desiredRoutes, readRoutes } from '../backend/host-gw/routes';
import type { Lease } from '../lease';
import type { NetworkConfig, Pool } from '../netconfig';

/**
 * Where status reads the network config and the leases: a lease store, or
 * the Kubernetes API (kube-status.ts), which also shows this node's Node.
 */
export interface StatusSource {
  readonly description: string;
  /** The network config JSON; undefined when there is none. */
  getConfig(): Promise<string | undefined>;
  list(): Promise<LeaseList>;
  ownNode?(): Promise<NodeStatus>;
}

/** This node's Node (kube). */
export interface NodeStatus {
  name: string;
  exists: boolean;
  /** Its NetworkUnavailable condition: "False (FlannelIsUp)"; absent when it has none. */
  networkUnavailable?: { status: string; reason?: string };
}

interface PeerStatus {
  /** The peer's Node (kube). */
  node?: string;
  subnet: string;
  publicIP: string;
  /** vxlan. */
  vtepMAC?: string;
  /** host-gw: the route the kernel has to the peer's subnet ("via 192.168.1.2 dev eth0"), absent when none. */
  via?: string;
  /** DirectRouting: routed via its public address, no neighbour or FDB entry needed (absent for VXLAN peers). */
  direct?: true;
  /** Over VXLAN only. */
  neigh?: boolean;
  fdb?: boolean;
  route: boolean;
}

interface VtepStatus {
  name: string;
  present: boolean;
  up?: boolean;
  mtu?: number;
  mac?: string;
  address?: boolean;
}

export interface StatusReport {
  /** The daemon whose flags status read (`vxlan-flannel status` without flags), as its command line. */
  daemon?: string;
  store: string;
  node?: NodeStatus;
  network?: { backend: string; network?: string; subnetLen?: number; ipv6Network?: string; ipv6SubnetLen?: number; vni?: number; port?: number };
  lease?: {
    subnet?: string;
    ipv6Subnet?: string;
    publicIP?: string;
    publicIPv6?: string;
    vtepMAC?: string;
    v6VtepMAC?: string;
    inStore: boolean;
  };
  /** flannel.<VNI> (IPv4). */
  vtep?: VtepStatus;
  /** flannel-v6.<VNI> (IPv6). */
  vtep6?: VtepStatus;
  /** IPv4 peers. */
  peers: PeerStatus[];
  ipv6Peers: PeerStatus[];
  ignored: string[];
  problems: string[];
  /** What the reader should know about how status looked (no daemon found, its environment unreadable). */
  notes: string[];
}

const same = (a: string | undefined, b: string) => a !== undefined && (IP.parse(a)?.toString() ?? a) === b;

/** DirectRouting's subnets as the daemon sees them: those of the VTEP's underlay device. */
async function directSubnets(vtep: IpLink): Promise<Prefix[]> {
  const dev = vxlanAttrs(vtep)?.link;
  const underlay = dev ? await getLink(dev) : undefined;
  return underlay ? connectedSubnets(underlay) : [];
}

/** Whether a peer's entries are in place: the direct route alone, or neighbour, FDB entry and VTEP route. */
function peerStatus(p: Peer, actual: Actual, direct: boolean): PeerStatus {
  const base = { subnet: p.subnet.toString(), publicIP: p.publicIP, vtepMAC: p.mac };
  const dst = (e: { dst: string }) => Prefix.parse(e.dst)?.toString() === base.subnet;
  if (direct) return { ...base, direct: true, route: !!actual.direct?.some((r) => dst(r) && same(r.gateway, p.publicIP)) };
  const n = actual.neigh.find((e) => same(e.dst, p.vtepIP));
  const f = actual.fdb.filter((e) => e.mac.toLowerCase() === p.mac && e.dst);
  const r = actual.routes.find(dst);
  return {
    ...base,
    neigh: !!n && isPermanent(n) && n.lladdr?.toLowerCase() === p.mac,
    fdb: f.length === 1 && same(f[0].dst, p.publicIP),
    route: !!r && same(r.gateway, p.vtepIP) && !!r.flags?.includes('onlink'),
  };
}

export async function collectStatus(store: StatusSource, subnetFile: string): Promise<StatusReport> {
  const report: StatusReport = { store: store.description, peers: [], ipv6Peers: [], ignored: [], problems: [], notes: [] };
  if (store.ownNode) {
    const node = (report.node = await store.ownNode());
    const name = JSON.stringify(node.name);
    if (!node.exists) report.problems.push(`node ${name} does not exist`);
    else if (node.networkUnavailable?.status === 'True') {
      report.problems.push(`node ${name} has NetworkUnavailable True (${node.networkUnavailable.reason ?? 'no reason'}): no pod is scheduled on it`);
    }
  }
  const cfgText = await store.getConfig();
  if (cfgText === undefined) {
    report.problems.push('no network config in the store');
    return report;
  }
  const cfg = parseNetworkConfig(cfgText);
  report.network = {
    backend: cfg.backend,
    ...(cfg.v4 ? { network: cfg.v4.network.toString(), subnetLen: cfg.v4.subnetLen } : {}),
    ...(cfg.v6 ? { ipv6Network: cfg.v6.network.toString(), ipv6SubnetLen: cfg.v6.subnetLen } : {}),
    ...(cfg.backend === 'vxlan' ? { vni: cfg.vni, port: cfg.port } : {}),
  };
  const envText = readIfExists(subnetFile);
  const held: LeaseSubnets = envText === undefined ? {} : subnetsOf(parseSubnetEnv(envText));
  const mine: LeaseSubnets = { subnet: cfg.v4 ? held.subnet : undefined, ipv6Subnet: cfg.v6 ? held.ipv6Subnet : undefined };
  if ((cfg.v4 && !mine.subnet) || (cfg.v6 && !mine.ipv6Subnet)) {
    const key = cfg.v4 && !mine.subnet ? 'FLANNEL_SUBNET' : 'FLANNEL_IPV6_SUBNET';
    report.problems.push(`${subnetFile} ${envText === undefined ? 'does not exist' : `has no ${key}`}: this node holds no lease`);
    return report;
  }
  const { leases, bad } = await store.list();
  report.ignored.push(...bad.map((b) => `${b.key}: ${b.why}`));
  const own = leases.find((l) => leaseKey(l) === leaseKey(mine));
  const a = own?.attrs;
  report.lease = {
    ...(mine.subnet ? { subnet: mine.subnet.toString() } : {}),
    ...(mine.ipv6Subnet ? { ipv6Subnet: mine.ipv6Subnet.toString() } : {}),
    inStore: !!own,
    ...(a?.publicIP ? { publicIP: a.publicIP.toString() } : {}),
    ...(a?.publicIPv6 ? { publicIPv6: a.publicIPv6.toString() } : {}),
    ...(a?.vtepMAC ? { vtepMAC: a.vtepMAC } : {}),
    ...(a?.v6VtepMAC ? { v6VtepMAC: a.v6VtepMAC } : {}),
  };
  if (!own) report.problems.push(`lease ${describeSubnets(mine)} is not in the store`);
  const ours = allAddresses(await listLinks()); // judged as the daemon judges them: no peer at an address of ours
  if (cfg.backend === 'host-gw') {
    await hostGwPeers(report, cfg, mine, leases, ours, a?.publicIP, a?.publicIPv6);
    return report;
  }

  for (const family of [4, 6] as const) {
    const pool = family === 4 ? cfg.v4 : cfg.v6;
    const subnet = family === 4 ? mine.subnet : mine.ipv6Subnet;
    if (!pool || !subnet) continue;
    const name = family === 4 ? vtepName(cfg.vni) : vtep6Name(cfg.vni);
    const link: IpLink | undefined = await getLink(name);
    const want = subnet.network.toString();
    const hostLen = family === 4 ? 32 : 128;
    let vtep: VtepStatus = { name, present: !!link };
    if (link) {
      const hasAddr = (link.addr_info ?? []).some((x) => x.family === (family === 4 ? 'inet' : 'inet6') && same(x.local, want) && x.prefixlen === hostLen);
      vtep = { name, present: true, up: isUp(link), mtu: link.mtu, mac: linkMac(link), address: hasAddr };
      if (!isUp(link)) report.problems.push(`VTEP ${name} is down`);
      if (!hasAddr) report.problems.push(`VTEP ${name} lacks ${want}/${hostLen}`);
      const leaseMac = family === 4 ? a?.vtepMAC : a?.v6VtepMAC;
      if (leaseMac && leaseMac !== linkMac(link)) report.problems.push(`VTEP ${name} MAC ${linkMac(link)} is not the lease's ${family === 4 ? 'BackendData' : 'BackendV6Data'}.VtepMAC ${leaseMac}`);
    } else {
      report.problems.push(`VTEP ${name} does not exist`);
    }
    if (family === 4) report.vtep = vtep;
    else report.vtep6 = vtep;
    if (!link) continue;

    const self = { subnet, publicIP: family === 4 ? a?.publicIP : a?.publicIPv6, vni: cfg.vni, mac: linkMac(link), own: ours };
    const { peers, skipped } = desiredPeers(leases, self, pool.network);
    report.ignored.push(...skipped.map((s) => (cfg.v4 && cfg.v6 ? `IPv${family}: ${s}` : s)));
    const direct = cfg.directRouting ? await directSubnets(link) : [];
    const actual = await readActual(name, undefined, family, direct.length ? pool.network : undefined);
    for (const p of peers) {
      const node = leases.find((l) => subnetOf(l, family)?.toString() === p.subnet.toString())?.node;
      const st: PeerStatus = { ...(node ? { node } : {}), ...peerStatus(p, actual, isDirectPeer(p, direct)) };
      for (const k of ['neigh', 'fdb', 'route'] as const) {
        if (st[k] === false) report.problems.push(`peer ${st.subnet}: ${st.direct ? 'direct ' : ''}${k} missing or wrong`);
      }
      (family === 4 ? report.peers : report.ipv6Peers).push(st);
    }
  }
  return report;
}

/** host-gw: each peer's route via its public address (on whichever device the kernel has it). */
async function hostGwPeers(report: StatusReport, cfg: NetworkConfig, mine: LeaseSubnets, leases: Lease[], own: IP[], publicIP?: IP, publicIPv6?: IP): Promise<void> {
  for (const family of [4, 6] as const) {
    const pool: Pool | undefined = family === 4 ? cfg.v4 : cfg.v6;
    const subnet = subnetOf(mine, family);
    if (!pool || !subnet) continue;
    const { peers, skipped } = desiredRoutes(leases, { subnet, publicIP: family === 4 ? publicIP : publicIPv6, own }, pool.network);
    report.ignored.push(...skipped.map((s) => (cfg.v4 && cfg.v6 ? `IPv${family}: ${s}` : s)));
    const routes = await readRoutes(pool.network);
    for (const p of peers) {
      const dst = p.subnet.toString();
      const r = routes.find((x) => Prefix.parse(x.dst)?.toString() === dst && x.gateway);
      const route = !!r && same(r.gateway, p.gateway);
      if (!route) report.problems.push(`peer ${dst}: route via ${p.gateway} missing or wrong`);
      const st: PeerStatus = { ...(p.node ? { node: p.node } : {}), subnet: dst, publicIP: p.gateway, route, ...(r ? { via: `via ${r.gateway}${r.dev ? ` dev ${r.dev}` : ''}` } : {}) };
      (family === 4 ? report.peers : report.ipv6Peers).push(st);
    }
  }
}

export function formatStatus(r: StatusReport): string {
  const lines: string[] = [...(r.daemon ? [`daemon:  ${r.daemon}`] : []), `store:   ${r.store}`];
  if (r.node) {
    const cond = r.node.networkUnavailable;
    lines.push(`node:    ${r.node.name}${r.node.exists ? `, NetworkUnavailable ${cond ? `${cond.status}${cond.reason ? ` (${cond.reason})` : ''}` : 'not set'}` : ' MISSING'}`);
  }
  if (r.network) {
    const nets: string[] = [];
    if (r.network.network) nets.push(`${r.network.network} (/${r.network.subnetLen} per node)`);
    if (r.network.ipv6Network) nets.push(`${r.network.ipv6Network} (/${r.network.ipv6SubnetLen} per node)`);
    lines.push(`network: ${nets.join(' + ')}, ${r.network.backend === 'host-gw' ? 'backend host-gw' : `VNI ${r.network.vni}, port ${r.network.port}`}`);
  }
  if (r.lease) {
    const l = r.lease;
    const subnets = [l.subnet, l.ipv6Subnet].filter(Boolean).join(' + ');
    const pub = [l.publicIP, l.publicIPv6].filter(Boolean).join(', ');
    const macs = [l.vtepMAC, l.v6VtepMAC].filter(Boolean).join(', ');
    lines.push(`lease:   ${subnets}${l.inStore ? `  public ${pub}  VtepMAC ${macs || '-'}` : '  (not in the store)'}`);
  }
  for (const v of [r.vtep, r.vtep6]) {
    if (!v) continue;
    lines.push(
      v.present
        ? `VTEP:    ${v.name} ${v.up ? 'up' : 'DOWN'}, MTU ${v.mtu}, MAC ${v.mac}, address ${v.address ? 'ok' : 'MISSING'}`
        : `VTEP:    ${v.name} MISSING`,
    );
  }
  const all = [...r.peers, ...r.ipv6Peers];
  if (all.length) {
    lines.push('peers:');
    const ok = (b: boolean | undefined) => (b === undefined ? '-' : b ? 'ok' : 'MISSING');
    const named = all.some((p) => p.node);
    const routed = r.network?.backend === 'host-gw';
    const rows = routed
      ? all.map((p) => [...(named ? [p.node ?? '-'] : []), p.subnet, p.publicIP, `${ok(p.route)}${p.via ? ` (${p.via})` : ''}`])
      : all.map((p) => [...(named ? [p.node ?? '-'] : []), p.subnet, p.publicIP, p.vtepMAC ?? '-', ok(p.neigh), ok(p.fdb), `${ok(p.route)}${p.direct ? ' (direct)' : ''}`]);
    const table = formatTable([...(named ? ['NODE'] : []), 'SUBNET', 'PUBLIC IP', ...(routed ? [] : ['VTEP MAC', 'NEIGH', 'FDB']), 'ROUTE'], rows);
    lines.push(...table.trimEnd().split('\n').map((l) => `  ${l}`));
  } else if (r.lease) {
    lines.push('peers:   none');
  }
  for (const s of r.ignored) lines.push(`ignored: ${s}`);
  for (const n of r.notes) lines.push(`note:    ${n}`);
  for (const p of r.problems) lines.push(`problem: ${p}`);
  lines.push(r.problems.length ? `state:   DEGRADED (${r.problems.length} problem${r.problems.length > 1 ? 's' : ''})` : 'state:   ok');
  return lines.join('\n') + '\n';
}
