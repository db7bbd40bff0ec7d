// host-gw's peers: one route per peer lease of type host-gw,
// `<peer subnet> via <peer public IP> dev <underlay>`, as flannel's
// RouteNetwork makes them (pkg/backend/route_network.go). Planning is a pure
// function of the leases and the routes the kernel has; applying it is one
// batched `ip` exec. One family at a time: IPv4 peers via PublicIP, IPv6 peers
// via PublicIPv6.
import { IP, Prefix } from '../../../net/ip';
import { runBatch, type Line } from '../../../iproute/batch';
import { listRoutesWithin, routeDel, routeReplace, type IpRoute } from '../../../iproute/route';
import type { RouteEvent } from '../../../iproute/monitor';
import { describeSubnets, subnetOf, type Lease } from '../../lease';
import { SubnetClaims } from '../subnet-claims';
import { type AddressContext, publicAddressProblem } from '../public-address';

export interface RoutePeer {
  subnet: Prefix;
  /** The peer's public address: the route's gateway. */
  gateway: string;
  /** Its Kubernetes Node, when the leases come from there (status). */
  node?: string;
}

export interface RouteSelf extends AddressContext {
  subnet: Prefix;
  /** Unknown when this node's lease is missing (status). */
  publicIP?: IP;
}

/**
 * The peers of `network`'s family the leases ask for, judged at once
 * (status; the daemon keeps a RouteIndex); skips ours, leases of another
 * backend (flanneld logs "Ignoring non-host-gw subnet"), leases we cannot use
 * and leases overlapping an established one, saying why ("lease <subnets>: <why>").
 */
export function desiredRoutes(leases: readonly Lease[], self: RouteSelf, network: Prefix): { peers: RoutePeer[]; skipped: string[] } {
  return new RouteIndex(self, network).reset(leases);
}

/** One lease: the route it asks for, why it is skipped ("lease <subnets>: <why>"), or undefined for our own. */
export function routeVerdict(l: Lease, self: RouteSelf, network: Prefix, selfKey = self.subnet.toString()): RoutePeer | string | undefined {
  const family = network.family;
  const field = family === 4 ? 'PublicIP' : 'PublicIPv6';
  const what = () => `lease ${describeSubnets(l)}`; // only for a lease skipped: thousands are not
  const subnet = subnetOf(l, family);
  if (subnet && subnet.toString() === selfKey) return undefined;
  if (l.attrs.backendType !== 'host-gw') return `${what()}: backend ${JSON.stringify(l.attrs.backendType)} is not host-gw`;
  if (!subnet) return `${what()}: no IPv${family} subnet (its node is not reachable over IPv${family})`;
  const publicIP = family === 4 ? l.attrs.publicIP : l.attrs.publicIPv6;
  if (!publicIP) return `${what()}: no ${field}`;
  if (self.publicIP && publicIP.equals(self.publicIP)) return `${what()}: ${field} ${publicIP} is this node's (a stale lease of ours?)`;
  const unusable = publicAddressProblem(publicIP, self);
  if (unusable) return `${what()}: ${field} ${publicIP} ${unusable}`;
  if (!network.contains(subnet.network) || subnet.length < network.length) return `${what()}: outside the network ${network}`;
  if (network.contains(self.subnet.network) && (subnet.contains(self.subnet.network) || self.subnet.contains(subnet.network))) return `${what()}: overlaps this node's subnet ${self.subnet}`;
  return { subnet, gateway: publicIP.toString(), ...(l.node ? { node: l.node } : {}) };
}

/**
 * The routes one family wants, kept lease by lease (as vxlan's PeerIndex):
 * a changes pass hands in the leases that left and came and learns which
 * peer subnets may want another route now, without looking at the others.
 * Overlapping subnets (the same one, or one inside another): the established
 * lease keeps its route, the other is skipped (subnet-claims.ts).
 */
export class RouteIndex {
  private readonly judged = new Map<Lease, RoutePeer | undefined>();
  private readonly claims = new SubnetClaims();
  private readonly selfKey: string;

  constructor(
    private readonly self: RouteSelf,
    private readonly network: Prefix,
  ) {
    this.selfKey = self.subnet.toString();
  }

  /** The index of exactly `leases`: every route they want, and why the others are skipped. */
  reset(leases: readonly Lease[]): { peers: RoutePeer[]; skipped: string[] } {
    this.judged.clear();
    this.claims.clear();
    const skipped = this.add(leases);
    const peers: RoutePeer[] = [];
    for (const key of this.claims.keys()) {
      const p = this.wanted(key);
      if (p) peers.push(p);
      skipped.push(...this.claims.conflictsAt(key));
    }
    return { peers, skipped };
  }

  /** What the index holds that `leases` lacks, and the other way round (compared by identity). */
  diff(leases: readonly Lease[]): { removed: Lease[]; added: Lease[] } {
    const now = new Set(leases);
    return { removed: [...this.judged.keys()].filter((l) => !now.has(l)), added: leases.filter((l) => !this.judged.has(l)) };
  }

  /** Takes `removed` out and puts `added` in; the subnet keys whose route may differ now (those the changed leases overlap), and why leases are skipped. */
  apply(removed: readonly Lease[], added: readonly Lease[]): { keys: Set<string>; skipped: string[] } {
    const keys = new Set<string>();
    /** The arrival rank each removed subnet had: a lease rewritten (removed and added again) keeps it. */
    const ranks = new Map<string, number>();
    for (const l of removed) {
      const p = this.judged.get(l);
      this.judged.delete(l);
      if (!p) continue;
      const key = p.subnet.toString();
      for (const k of this.claims.overlapping(p.subnet)) keys.add(k);
      const rank = this.claims.remove(l, key)!;
      ranks.set(key, Math.min(rank, ranks.get(key) ?? rank));
    }
    const skipped = this.add(added, ranks);
    for (const l of added) {
      const p = this.judged.get(l);
      if (p) for (const k of this.claims.overlapping(p.subnet)) keys.add(k);
    }
    for (const k of keys) skipped.push(...this.claims.conflictsAt(k));
    return { keys, skipped };
  }

  /** The route wanted to subnet `key`: the established lease's, unless an earlier one overlaps it. */
  wanted(key: string): RoutePeer | undefined {
    const l = this.claims.standing(key);
    return l && this.judged.get(l);
  }

  private add(leases: readonly Lease[], ranks?: Map<string, number>): string[] {
    const skipped: string[] = [];
    for (const l of leases) {
      const v = routeVerdict(l, this.self, this.network, this.selfKey);
      if (typeof v === 'string') skipped.push(v);
      const peer = typeof v === 'string' ? undefined : v;
      this.judged.set(l, peer);
      if (!peer) continue;
      const key = peer.subnet.toString();
      this.claims.add(l, peer.subnet, key, ranks?.get(key));
      ranks?.delete(key);
    }
    return skipped;
  }
}

/**
 * The routes the kernel reported (kernel-watch.ts) that differ from what
 * was programmed (`before`, by subnet): the peer subnets to plan again, and
 * `actual` with what the kernel holds for them (and the routes it reported
 * that no peer explains). Events that agree with what was programmed (the
 * echo of our own commands) ask for nothing.
 */
export function routeDrift(seen: ReadonlyMap<string, RouteEvent>, before: ReadonlyMap<string, RoutePeer>, dev: string, network: Prefix): { keys: Set<string>; overlay(actual: IpRoute[], keys: ReadonlySet<string>): IpRoute[] } {
  const keys = new Set<string>();
  for (const [dst, e] of seen) {
    const p = before.get(dst);
    if (p && planRoutes([p], overlayRoutes(programmedRoutes([p], dev), [[dst, e]], network.family), dev, network).changes.length === 0) continue;
    if (p) keys.add(dst);
  }
  return {
    keys,
    // reported routes of planned subnets, and routes no peer explains (planRoutes removes those a full pass would)
    overlay: (actual, planned) => overlayRoutes(actual, [...seen].filter(([dst, e]) => planned.has(dst) || (!before.has(dst) && !e.deleted)), network.family),
  };
}

/** `actual` with each reported route in place of those to its destination (gone when deleted). */
function overlayRoutes(actual: readonly IpRoute[], seen: readonly (readonly [string, RouteEvent])[], family: 4 | 6): IpRoute[] {
  let out = [...actual];
  for (const [dst, e] of seen) {
    out = out.filter((r) => dstOf(r, family)?.toString() !== dst);
    if (!e.deleted) out.push(e.route);
  }
  return out;
}

/** The routes to `peers` as the kernel holds them once a plan made them (planning against this needs no read). */
export function programmedRoutes(peers: readonly RoutePeer[], dev: string): IpRoute[] {
  return peers.map((p) => ({ dst: p.subnet.toString(), gateway: p.gateway, dev }));
}

export interface RoutePlan {
  /** One ip batch: stale and differing routes go first, then the peers' routes are put in place. */
  lines: Line[];
  /** One line per change, for the log. */
  changes: string[];
  /** Per change, the peer subnet it routes; undefined for the removal of a route no lease asks for. */
  subjects: (string | undefined)[];
  /** Per batch line, the index in `changes` of the change it belongs to. */
  owners: number[];
}

/** iproute2 prints addresses as inet_ntop does; ours are RFC 5952. Compare them parsed. */
const norm = (addr: string | undefined) => (addr === undefined ? undefined : (IP.parse(addr)?.toString() ?? addr));

const hostLen = (family: 4 | 6) => (family === 4 ? 32 : 128);
const dstOf = (r: IpRoute, family: 4 | 6) => Prefix.parse(r.dst.includes('/') ? r.dst : `${r.dst}/${hostLen(family)}`);

/** Whether `r` is the route `peer` asks for on `dev`. */
export const isPeerRoute = (r: IpRoute, peer: RoutePeer, dev: string) => norm(r.gateway) === peer.gateway && r.dev === dev;

/**
 * The commands that make the routes into `network` (read by readRoutes) match
 * `peers` on `dev`. A route to a node subnet of the overlay (longer than the
 * network: a route for the whole network is someone else's) via a gateway
 * that no peer asks for goes (its lease went, or its node left host-gw); so
 * does a route to a peer's subnet that differs from the peer's (another
 * gateway, another device: flannel replaces it too). Routes without a gateway
 * (the bridge's, a blackhole, a VTEP's kernel routes) are never touched.
 */
export function planRoutes(peers: readonly RoutePeer[], actual: readonly IpRoute[], dev: string, network: Prefix): RoutePlan {
  const plan: RoutePlan = { lines: [], changes: [], subjects: [], owners: [] };
  const add = (line: Line) => {
    plan.lines.push(line);
    plan.owners.push(plan.changes.length);
  };
  const family = network.family;
  const want = new Map(peers.map((p) => [p.subnet.toString(), p]));
  const kept = new Set<string>();
  for (const r of actual) {
    if (!r.gateway || r.protocol === 'kernel') continue;
    const dst = dstOf(r, family);
    if (!dst || !network.contains(dst.network) || dst.length <= network.length) continue;
    const p = want.get(dst.toString());
    if (p && isPeerRoute(r, p, dev) && !kept.has(dst.toString())) {
      kept.add(dst.toString());
      continue;
    }
    add(routeDel({ dst: r.dst, gw: r.gateway, ...(r.dev ? { dev: r.dev } : {}), ...(r.metric !== undefined ? { metric: r.metric } : {}) }));
    plan.changes.push(`route ${dst} via ${r.gateway}${r.dev ? ` dev ${r.dev}` : ''}: removed (${p ? `now via ${p.gateway} dev ${dev}` : 'no lease'})`);
    plan.subjects.push(p?.subnet.toString());
  }
  for (const p of peers) {
    const dst = p.subnet.toString();
    if (kept.has(dst)) continue;
    add(routeReplace({ dst, gw: p.gateway, dev }));
    plan.changes.push(`route ${dst} via ${p.gateway} dev ${dev}: added`);
    plan.subjects.push(dst);
  }
  return plan;
}

/** The routes of the main table into `network` (one exec). */
export function readRoutes(network: Prefix, netns?: string): Promise<IpRoute[]> {
  return listRoutesWithin(network.toString(), netns, network.family);
}

/** Lines of a plan the kernel refused; the rest was made all the same. */
export class RoutePlanError extends Error {
  constructor(
    readonly failures: string[],
    readonly failedChanges: ReadonlySet<number>,
  ) {
    super(failures.length === 1 ? failures[0] : `${failures.length} changes failed: ${failures.join('; ')}`);
    this.name = 'RoutePlanError';
  }
}

/** Runs a plan (one batch; a refused line does not stop the rest) and throws what the kernel refused. */
export async function applyRoutes(plan: RoutePlan, netns?: string): Promise<void> {
  if (!plan.lines.length) return;
  const res = await runBatch('ip', plan.lines, { netns });
  const failures: string[] = [];
  const failed = new Set<number>();
  res.errors.forEach((msg, i) => {
    if (msg === undefined) return;
    failures.push(`ip ${plan.lines[i].join(' ')}: ${msg}`);
    failed.add(plan.owners[i]);
  });
  if (failures.length) throw new RoutePlanError(failures, failed);
}
