// Peers on the VTEP: what the leases say should be there (neighbour, FDB,
// route per peer), what the kernel has, and the commands that turn one into
// the other. Planning is a pure function; applying it is three batched execs.
import { IP, Prefix } from '../net/ip';
import { batch } from '../iproute/exec';
import { FdbEntry, fdbDel, fdbReplace, listFdb } from '../iproute/fdb';
import { NeighEntry, isPermanent, listNeigh, neighDel, neighReplace } from '../iproute/neigh';
import { RouteEntry, listRoutes, routeDel, routeReplaceOnlink } from '../iproute/vxlan';
import type { Lease } from './lease';

export interface Peer {
  subnet: Prefix;
  /** The peer's VTEP address: its subnet's network address. */
  vtepIP: string;
  mac: string;
  publicIP: string;
}

export interface Actual {
  neigh: NeighEntry[];
  fdb: FdbEntry[];
  routes: RouteEntry[];
}

export interface Plan {
  /** ip batch 1: stale routes go first, then neighbours are put in place. */
  ipFirst: string[][];
  /** bridge batch: FDB entries put in place, stale ones removed. */
  bridge: string[][];
  /** ip batch 2: routes put in place, stale neighbours removed. */
  ipLast: string[][];
  /** One line per change, for the log. */
  changes: string[];
}

export interface Self {
  subnet: Prefix;
  /** Unknown when this node's lease is missing (status). */
  publicIP?: IP;
  vni: number;
}

/** The peers a set of leases asks for; skips ours, other backends and leases we cannot use (with why). */
export function desiredPeers(leases: readonly Lease[], self: Self, network: Prefix): { peers: Peer[]; skipped: string[] } {
  const peers: Peer[] = [];
  const skipped: string[] = [];
  for (const l of leases) {
    const what = `lease ${l.subnet}`;
    if (l.subnet.toString() === self.subnet.toString()) continue;
    if (l.attrs.backendType !== 'vxlan') {
      skipped.push(`${what}: backend ${JSON.stringify(l.attrs.backendType)} is not vxlan`);
      continue;
    }
    if (!l.attrs.vtepMAC) {
      skipped.push(`${what}: no BackendData.VtepMAC`);
      continue;
    }
    if (l.attrs.vni !== undefined && l.attrs.vni !== self.vni) {
      skipped.push(`${what}: VNI ${l.attrs.vni} is not ours (${self.vni})`);
      continue;
    }
    if (self.publicIP && l.attrs.publicIP.equals(self.publicIP)) {
      skipped.push(`${what}: PublicIP ${l.attrs.publicIP} is this node's (a stale lease of ours?)`);
      continue;
    }
    if (!network.contains(l.subnet.network) || l.subnet.length < network.length) {
      skipped.push(`${what}: outside the network ${network}`);
      continue;
    }
    if (network.contains(self.subnet.network) && (l.subnet.contains(self.subnet.network) || self.subnet.contains(l.subnet.network))) {
      skipped.push(`${what}: overlaps this node's subnet ${self.subnet}`);
      continue;
    }
    peers.push({ subnet: l.subnet, vtepIP: l.subnet.network.toString(), mac: l.attrs.vtepMAC, publicIP: l.attrs.publicIP.toString() });
  }
  return { peers, skipped };
}

/** The commands that make `actual` match `peers` on `dev`; nothing when it already does. */
export function planPeers(peers: readonly Peer[], actual: Actual, dev: string, network: Prefix): Plan {
  const plan: Plan = { ipFirst: [], bridge: [], ipLast: [], changes: [] };
  const wantNeigh = new Map(peers.map((p) => [p.vtepIP, p]));
  const wantFdb = new Map(peers.map((p) => [p.mac, p]));
  const wantRoute = new Map(peers.map((p) => [p.subnet.toString(), p]));

  // Stale routes: anything in the overlay network on the VTEP that no peer asks for.
  for (const r of actual.routes) {
    const dst = r.dst.includes('/') ? r.dst : `${r.dst}/32`;
    const p = Prefix.parse(dst);
    if (!p || !network.contains(p.network) || wantRoute.has(p.toString())) continue;
    plan.ipFirst.push(routeDel(dst, dev));
    plan.changes.push(`route ${dst}: removed (no lease)`);
  }
  for (const p of peers) {
    const n = actual.neigh.find((e) => e.dst === p.vtepIP);
    if (n && isPermanent(n) && n.lladdr?.toLowerCase() === p.mac) continue;
    plan.ipFirst.push(neighReplace(p.vtepIP, p.mac, dev));
    plan.changes.push(`neigh ${p.vtepIP} → ${p.mac}: ${n ? `was ${n.lladdr ?? 'incomplete'} ${n.state?.join(',') ?? ''}`.trim() : 'added'}`);
  }

  for (const p of peers) {
    const entries = actual.fdb.filter((e) => e.mac.toLowerCase() === p.mac && e.dst);
    if (entries.length === 1 && entries[0].dst === p.publicIP && entries[0].state === 'permanent') continue;
    // `replace` rewrites a MAC's one remote in place; extra remotes (appended by hand) go first.
    if (entries.length > 1) for (const e of entries) plan.bridge.push(fdbDel(e.mac, e.dst!, dev));
    plan.bridge.push(fdbReplace(p.mac, p.publicIP, dev));
    plan.changes.push(`fdb ${p.mac} → ${p.publicIP}: ${entries.length ? `was ${entries.map((e) => e.dst).join(',')}` : 'added'}`);
  }
  for (const e of actual.fdb) {
    if (!e.dst) continue; // the device's own entries
    if (wantFdb.has(e.mac.toLowerCase())) continue;
    plan.bridge.push(fdbDel(e.mac, e.dst, dev));
    plan.changes.push(`fdb ${e.mac} → ${e.dst}: removed (no lease)`);
  }

  for (const p of peers) {
    const dst = p.subnet.toString();
    const r = actual.routes.find((e) => e.dst === dst);
    if (r && r.gateway === p.vtepIP && r.flags?.includes('onlink')) continue;
    plan.ipLast.push(routeReplaceOnlink(dst, p.vtepIP, dev));
    plan.changes.push(`route ${dst} via ${p.vtepIP}: ${r ? `was via ${r.gateway ?? 'none'}` : 'added'}`);
  }
  for (const n of actual.neigh) {
    if (!isPermanent(n) || wantNeigh.has(n.dst)) continue;
    plan.ipLast.push(neighDel(n.dst, dev));
    plan.changes.push(`neigh ${n.dst} → ${n.lladdr}: removed (no lease)`);
  }
  return plan;
}

export async function readActual(dev: string, netns?: string): Promise<Actual> {
  const [neigh, fdb, routes] = await Promise.all([listNeigh(dev, netns), listFdb(dev, netns), listRoutes(dev, netns)]);
  return { neigh, fdb, routes };
}

/** Applies a plan in its order: neighbours before FDB before routes, removals the other way round. */
export async function applyPlan(plan: Plan, netns?: string): Promise<void> {
  await batch('ip', plan.ipFirst, { netns });
  await batch('bridge', plan.bridge, { netns });
  await batch('ip', plan.ipLast, { netns });
}
