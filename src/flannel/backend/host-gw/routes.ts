// host-gw's peers: one route per peer lease of type host-gw,
// `<peer subnet> via <peer public IP> dev <underlay>`, as flannel's
// RouteNetwork makes them (pkg/backend/route_network.go). Planning is a pure
// function of the leases and the routes the kernel has; applying it is one
// batched `ip` exec. One family at a time: IPv4 peers via PublicIP, IPv6 peers
// via PublicIPv6.
import { IP, Prefix } from '../../../net/ip';
import { runBatch, type Line } from '../../../iproute/batch';
import { listRoutesWithin, routeDel, routeReplace, type IpRoute } from '../../../iproute/route';
import { describeSubnets, subnetOf, type Lease } from '../../lease';

export interface RoutePeer {
  subnet: Prefix;
  /** The peer's public address: the route's gateway. */
  gateway: string;
  /** Its Kubernetes Node, when the leases come from there (status). */
  node?: string;
}

export interface RouteSelf {
  subnet: Prefix;
  /** Unknown when this node's lease is missing (status). */
  publicIP?: IP;
}

/**
 * The peers of `network`'s family the leases ask for; skips ours, leases of
 * another backend (flanneld logs "Ignoring non-host-gw subnet") and leases we
 * cannot use, saying why ("lease <subnets>: <why>").
 */
export function desiredRoutes(leases: readonly Lease[], self: RouteSelf, network: Prefix): { peers: RoutePeer[]; skipped: string[] } {
  const peers: RoutePeer[] = [];
  const skipped: string[] = [];
  const family = network.family;
  const field = family === 4 ? 'PublicIP' : 'PublicIPv6';
  for (const l of leases) {
    const what = `lease ${describeSubnets(l)}`;
    const subnet = subnetOf(l, family);
    if (subnet && subnet.toString() === self.subnet.toString()) continue;
    if (l.attrs.backendType !== 'host-gw') {
      skipped.push(`${what}: backend ${JSON.stringify(l.attrs.backendType)} is not host-gw`);
      continue;
    }
    if (!subnet) {
      skipped.push(`${what}: no IPv${family} subnet (its node is not reachable over IPv${family})`);
      continue;
    }
    const publicIP = family === 4 ? l.attrs.publicIP : l.attrs.publicIPv6;
    if (!publicIP) {
      skipped.push(`${what}: no ${field}`);
      continue;
    }
    if (self.publicIP && publicIP.equals(self.publicIP)) {
      skipped.push(`${what}: ${field} ${publicIP} is this node's (a stale lease of ours?)`);
      continue;
    }
    if (!network.contains(subnet.network) || subnet.length < network.length) {
      skipped.push(`${what}: outside the network ${network}`);
      continue;
    }
    if (network.contains(self.subnet.network) && (subnet.contains(self.subnet.network) || self.subnet.contains(subnet.network))) {
      skipped.push(`${what}: overlaps this node's subnet ${self.subnet}`);
      continue;
    }
    peers.push({ subnet, gateway: publicIP.toString(), ...(l.node ? { node: l.node } : {}) });
  }
  return { peers, skipped };
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
