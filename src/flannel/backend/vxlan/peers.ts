// Peers on a VTEP: what the leases say should be there (neighbour, FDB,
// route per peer), what the kernel has, and the commands that turn one into
// the other. Planning is a pure function; applying it is three batched execs.
// With flannel's DirectRouting, a peer whose public address is on one of this
// node's directly connected underlay subnets gets a plain route
// `<subnet> via <publicIP>` instead (no neighbour, no FDB entry), as flanneld
// does; a peer switching between the two forms loses the other one.
// One family at a time: flannel.<VNI> carries IPv4 (BackendData, PublicIP),
// flannel-v6.<VNI> IPv6 (BackendV6Data, PublicIPv6); the same code serves both.
import { IP, Prefix } from '../../../net/ip';
import { runBatch, type Line } from '../../../iproute/batch';
import { FdbEntry, fdbDel, fdbReplace, listFdb } from '../../../iproute/fdb';
import { NeighEntry, isPermanent, listNeigh, neighDel, neighReplace } from '../../../iproute/neigh';
import { listRoutes, listRoutesWithin, routeDel, routeReplace, type IpRoute } from '../../../iproute/route';
import { Lease, describeSubnets, subnetOf } from '../../lease';
import { isUnicastMac } from '../../../net/mac';
import { type AddressContext, publicAddressProblem } from '../public-address';

export interface Peer {
  subnet: Prefix;
  /** `subnet` as text, when known (desiredPeers sets it): the peer index keys peers by it. */
  key?: string;
  /** The peer's VTEP address: its subnet's network address. */
  vtepIP: string;
  mac: string;
  publicIP: string;
}

export interface Actual {
  neigh: NeighEntry[];
  fdb: FdbEntry[];
  /** Routes through the VTEP. */
  routes: IpRoute[];
  /**
   * Routes into the overlay network through other devices via a gateway: the
   * direct routes (read when readActual is given the network). Absent: not
   * read, and then no direct route is ever removed.
   */
  direct?: IpRoute[];
}

export interface Plan {
  /** ip batch 1: stale routes go first, then neighbours are put in place. */
  ipFirst: Line[];
  /** bridge batch: FDB entries put in place, stale ones removed. */
  bridge: Line[];
  /** ip batch 2: routes put in place, stale neighbours removed. */
  ipLast: Line[];
  /** One line per change, for the log. */
  changes: string[];
  /** Per change, the peer subnet it programs; undefined for the removal of a stale entry. */
  subjects: (string | undefined)[];
  /** Per batch line, the index in `changes` of the change it belongs to. */
  owners: { ipFirst: number[]; bridge: number[]; ipLast: number[] };
}

/** Lines of a plan the kernel refused; every batch was run all the same. */
export class PlanError extends Error {
  constructor(
    /** "ip route replace ...: <why>", one per refused line. */
    readonly failures: string[],
    /** Indexes in the plan's `changes` of the changes not (fully) made. */
    readonly failedChanges: ReadonlySet<number>,
  ) {
    super(failures.length === 1 ? failures[0] : `${failures.length} changes failed: ${failures.join('; ')}`);
    this.name = 'PlanError';
  }
}

export interface Self extends AddressContext {
  /** This node's subnet of the family being planned. */
  subnet: Prefix;
  /** Unknown when this node's lease is missing (status). */
  publicIP?: IP;
  vni: number;
  /** This node's VTEP MAC on this family's VTEP: a peer advertising it would take our traffic. */
  mac?: string;
}


/** Our own lease, in a verdict. */
export const OURS = 0;
export type Verdict = Peer | string | typeof OURS;

/** One lease: the peer it asks for, why it is skipped ("lease <subnets>: <why>"), or OURS. */
export function verdict(l: Lease, self: Self, network: Prefix, selfKey: string): Verdict {
  const v6 = network.family === 6;
  const data = v6 ? 'BackendV6Data' : 'BackendData';
  const subnet = subnetOf(l, network.family);
  const key = subnet?.toString();
  if (key === selfKey) return OURS;
  const what = () => `lease ${describeSubnets(l)}`; // only for a lease skipped: thousands are not
  if (l.attrs.backendType !== 'vxlan') return `${what()}: backend ${JSON.stringify(l.attrs.backendType)} is not vxlan`;
  if (!subnet || !key) return `${what()}: no IPv${network.family} subnet (its node is not reachable over IPv${network.family})`;
  const mac = (v6 ? l.attrs.v6VtepMAC : l.attrs.vtepMAC)?.toLowerCase();
  const vni = v6 ? l.attrs.v6Vni : l.attrs.vni;
  const publicIP = v6 ? l.attrs.publicIPv6 : l.attrs.publicIP;
  if (!mac) return `${what()}: no ${data}.VtepMAC`;
  if (vni !== undefined && vni !== self.vni) return `${what()}: ${data}.VNI ${vni} is not ours (${self.vni})`;
  if (!publicIP) return `${what()}: no ${v6 ? 'PublicIPv6' : 'PublicIP'}`;
  if (self.publicIP && publicIP.equals(self.publicIP)) return `${what()}: ${v6 ? 'PublicIPv6' : 'PublicIP'} ${publicIP} is this node's (a stale lease of ours?)`;
  const unusable = publicAddressProblem(publicIP, self);
  if (unusable) return `${what()}: ${v6 ? 'PublicIPv6' : 'PublicIP'} ${publicIP} ${unusable}`;
  if (!network.contains(subnet.network) || subnet.length < network.length) return `${what()}: outside the network ${network}`;
  if (network.contains(self.subnet.network) && (subnet.contains(self.subnet.network) || self.subnet.contains(subnet.network))) return `${what()}: overlaps this node's subnet ${self.subnet}`;
  if (!isUnicastMac(mac)) return `${what()}: ${data}.VtepMAC ${mac} is not a unicast MAC`;
  if (self.mac && mac === self.mac.toLowerCase()) return `${what()}: ${data}.VtepMAC ${mac} is this node's own VTEP MAC`;
  return { subnet, key, vtepIP: subnet.network.toString(), mac, publicIP: publicIP.toString() };
}

/** iproute2 prints addresses as inet_ntop does; ours are RFC 5952. Compare them parsed. */
const norm = (addr: string | undefined): string | undefined => (addr === undefined ? undefined : (IP.parse(addr)?.toString() ?? addr));

/** Whether `peer` is reached directly: its public address is on one of `direct` (this node's connected underlay subnets). */
export const isDirectPeer = (peer: Peer, direct: readonly Prefix[]) => {
  const ip = IP.parse(peer.publicIP);
  return !!ip && direct.some((d) => d.family === ip.family && d.contains(ip));
};

/**
 * The commands that make `actual` match `peers` on `dev`; nothing when it
 * already does. `direct`: this node's directly connected underlay subnets
 * (DirectRouting); empty, every peer goes over VXLAN.
 */
export function planPeers(all: readonly Peer[], actual: Actual, dev: string, network: Prefix, direct: readonly Prefix[] = []): Plan {
  const plan: Plan = { ipFirst: [], bridge: [], ipLast: [], changes: [], subjects: [], owners: { ipFirst: [], bridge: [], ipLast: [] } };
  // each line belongs to the change logged right after it
  const add = (batch: 'ipFirst' | 'bridge' | 'ipLast', line: Line) => {
    plan[batch].push(line);
    plan.owners[batch].push(plan.changes.length);
  };
  const note = (change: string, peer?: Peer) => {
    plan.changes.push(change);
    plan.subjects.push(peer?.subnet.toString());
  };
  const directPeers: Peer[] = [];
  const peers: Peer[] = [];
  for (const p of all) (direct.length && isDirectPeer(p, direct) ? directPeers : peers).push(p);
  planDirect(directPeers, actual, add, note, network);
  const wantNeigh = new Map(peers.map((p) => [p.vtepIP, p]));
  const wantFdb = new Map(peers.map((p) => [p.mac, p]));
  const wantRoute = new Map(peers.map((p) => [p.subnet.toString(), p]));

  const hostLen = network.family === 4 ? 32 : 128;
  // Stale routes: anything in the overlay network on the VTEP that no peer asks
  // for (but not the kernel's route to the VTEP's own IPv6 address), and routes
  // outside it shaped as we make them (a subnet via its own network address,
  // onlink): left from an earlier network config. Other routes are someone else's.
  for (const r of actual.routes) {
    if (r.protocol === 'kernel') continue;
    const dst = r.dst.includes('/') ? r.dst : `${r.dst}/${hostLen}`;
    const p = Prefix.parse(dst);
    if (!p || wantRoute.has(p.toString())) continue;
    const ourShape = norm(r.gateway) === p.network.toString() && !!r.flags?.includes('onlink');
    if (!network.contains(p.network) && !ourShape) continue;
    add('ipFirst', routeDel({ dst, dev }));
    note(`route ${dst}: removed (no lease)`);
  }
  // the kernel's entries by what they are looked up by: one pass each, not one per peer
  const neighOf = firstBy(actual.neigh, (e) => norm(e.dst));
  const routeOf = firstBy(actual.routes, (e) => Prefix.parse(e.dst)?.toString());
  const fdbOf = new Map<string, FdbEntry[]>();
  for (const e of actual.fdb) {
    if (!e.dst) continue;
    const mac = e.mac.toLowerCase();
    const list = fdbOf.get(mac);
    if (list) list.push(e);
    else fdbOf.set(mac, [e]);
  }
  for (const p of peers) {
    const n = neighOf.get(p.vtepIP);
    if (n && isPermanent(n) && n.lladdr?.toLowerCase() === p.mac) continue;
    add('ipFirst', neighReplace(p.vtepIP, p.mac, dev));
    note(`neigh ${p.vtepIP} → ${p.mac}: ${n ? `was ${n.lladdr ?? 'incomplete'} ${n.state?.join(',') ?? ''}`.trim() : 'added'}`, p);
  }

  for (const p of peers) {
    const entries = fdbOf.get(p.mac) ?? [];
    if (entries.length === 1 && norm(entries[0].dst) === p.publicIP && entries[0].state === 'permanent') continue;
    // `replace` rewrites a MAC's one remote in place; extra remotes (appended by hand) go first.
    if (entries.length > 1) for (const e of entries) add('bridge', fdbDel(e.mac, e.dst!, dev));
    add('bridge', fdbReplace(p.mac, p.publicIP, dev));
    note(`fdb ${p.mac} → ${p.publicIP}: ${entries.length ? `was ${entries.map((e) => e.dst).join(',')}` : 'added'}`, p);
  }
  for (const e of actual.fdb) {
    if (!e.dst) continue; // the device's own entries
    if (wantFdb.has(e.mac.toLowerCase())) continue;
    add('bridge', fdbDel(e.mac, e.dst, dev));
    note(`fdb ${e.mac} → ${e.dst}: removed (no lease)`);
  }

  for (const p of peers) {
    const dst = p.subnet.toString();
    const r = routeOf.get(dst);
    if (r && norm(r.gateway) === p.vtepIP && r.flags?.includes('onlink')) continue;
    add('ipLast', routeReplace({ dst, gw: p.vtepIP, dev, onlink: true }));
    note(`route ${dst} via ${p.vtepIP}: ${r ? `was via ${r.gateway ?? 'none'}` : 'added'}`, p);
  }
  for (const n of actual.neigh) {
    if (!isPermanent(n) || wantNeigh.has(norm(n.dst)!)) continue;
    add('ipLast', neighDel(n.dst, dev));
    note(`neigh ${n.dst} → ${n.lladdr}: removed (no lease)`);
  }
  return plan;
}

/** The first of `items` per key (as `find` would return it), keyed once. */
function firstBy<T>(items: readonly T[], key: (item: T) => string | undefined): Map<string, T> {
  const map = new Map<string, T>();
  for (const item of items) {
    const k = key(item);
    if (k !== undefined && !map.has(k)) map.set(k, item);
  }
  return map;
}

/**
 * What the kernel holds once a plan for `peers` has been applied in full:
 * planning against it (instead of a fresh readActual) gives only the
 * commands a change of the peers needs (a changes pass). Cheap: no exec, no
 * parsing of the kernel's lists.
 */
export function programmed(peers: readonly Peer[], direct: readonly Prefix[] = []): Actual {
  const actual: Required<Actual> = { neigh: [], fdb: [], routes: [], direct: [] };
  for (const p of peers) {
    const dst = p.subnet.toString();
    if (direct.length && isDirectPeer(p, direct)) {
      actual.direct.push({ dst, gateway: p.publicIP });
      continue;
    }
    actual.neigh.push({ dst: p.vtepIP, lladdr: p.mac, state: ['PERMANENT'] });
    actual.fdb.push({ mac: p.mac, dst: p.publicIP, state: 'permanent' });
    actual.routes.push({ dst, gateway: p.vtepIP, flags: ['onlink'] });
  }
  return actual;
}

/**
 * Direct routes: `<subnet> via <publicIP>` for each direct peer; a route to a
 * node subnet of the overlay (longer than the network itself: a route for
 * the whole network is someone else's) via a gateway on another device that
 * no direct peer asks for (the peer left, or went back to VXLAN) goes first.
 * A VXLAN route of a peer now direct is stale on the VTEP and goes with the
 * VTEP's stale routes.
 */
function planDirect(
  peers: readonly Peer[],
  actual: Actual,
  add: (batch: 'ipFirst' | 'ipLast', line: Line) => void,
  note: (change: string, peer?: Peer) => void,
  network: Prefix,
): void {
  const want = new Map(peers.map((p) => [p.subnet.toString(), p]));
  for (const r of actual.direct ?? []) {
    const prefix = Prefix.parse(r.dst.includes('/') ? r.dst : `${r.dst}/${network.family === 4 ? 32 : 128}`);
    if (!prefix || prefix.length <= network.length) continue;
    const p = want.get(prefix.toString());
    if (!r.gateway || (p && norm(r.gateway) === p.publicIP)) continue;
    add('ipFirst', routeDel({ dst: r.dst, gw: r.gateway, dev: r.dev }));
    note(`route ${r.dst} via ${r.gateway}${r.dev ? ` dev ${r.dev}` : ''}: removed (${p ? `now via ${p.publicIP}` : 'no direct peer'})`, p);
  }
  const present = new Set((actual.direct ?? []).map((e) => `${Prefix.parse(e.dst)?.toString()} via ${norm(e.gateway)}`));
  for (const p of peers) {
    const dst = p.subnet.toString();
    if (present.has(`${dst} via ${p.publicIP}`)) continue;
    add('ipLast', routeReplace({ dst, gw: p.publicIP }));
    note(`route ${dst} via ${p.publicIP} (direct): added`, p);
  }
}

/**
 * What the kernel has for the peers on `dev`. With `network` (DirectRouting),
 * also the routes into it via a gateway on other devices: one more exec.
 */
export async function readActual(dev: string, netns?: string, family: 4 | 6 = 4, network?: Prefix): Promise<Actual> {
  const [neigh, fdb, routes, direct] = await Promise.all([
    listNeigh(dev, netns, family),
    listFdb(dev, netns),
    listRoutes(dev, netns, family),
    network ? listRoutesWithin(network.toString(), netns, family) : undefined,
  ]);
  return { neigh, fdb, routes, ...(direct ? { direct: direct.filter((r) => r.dev !== dev && r.gateway && r.protocol !== 'kernel') } : {}) };
}

/**
 * Applies a plan in its order: neighbours before FDB before routes, removals
 * the other way round. Every batch runs even when a line of an earlier one
 * failed (one peer the kernel refuses must not keep the others' FDB entries
 * and routes out); the refused lines are thrown afterwards as a PlanError.
 */
export async function applyPlan(plan: Plan, netns?: string): Promise<void> {
  const [refused] = await applyPlans([plan], netns);
  if (refused) throw refused;
}

/**
 * Applies the plans of several VTEPs (a dual-stack node's two) as one plan:
 * each batch holds the lines of every plan, so both families cost one `ip`,
 * one `bridge` and one `ip` process, not one each. Per plan, the lines the
 * kernel refused, as a PlanError (undefined: all made).
 */
export async function applyPlans(plans: readonly Plan[], netns?: string): Promise<(PlanError | undefined)[]> {
  const failures = plans.map((): string[] => []);
  const failedChanges = plans.map(() => new Set<number>());
  for (const [program, batch] of [['ip', 'ipFirst'], ['bridge', 'bridge'], ['ip', 'ipLast']] as const) {
    const lines = plans.flatMap((p) => p[batch]);
    // per line of the joint batch: its plan, and its change in that plan
    const owners = plans.flatMap((p, k) => p.owners[batch].map((change) => [k, change] as const));
    const res = await runBatch(program, lines, { netns });
    res.errors.forEach((msg, i) => {
      if (msg === undefined) return;
      const [k, change] = owners[i];
      failures[k].push(`${program} ${lines[i].join(' ')}: ${msg}`);
      failedChanges[k].add(change);
    });
  }
  return plans.map((_, k) => (failures[k].length ? new PlanError(failures[k], failedChanges[k]) : undefined));
}
