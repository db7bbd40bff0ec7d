// A VTEP's drift as the kernel reported it (kernel-watch.ts): which peers'
// entries are not what the last pass programmed, and what the kernel holds
// for them now, so that a changes pass plans against it (planPeers) as a full
// pass plans against what it reads. An event that agrees with what was
// programmed (the echo of our own commands) asks for nothing.
import { IP, Prefix } from '../../../net/ip';
import type { NeighEvent, RouteEvent, FdbEvent } from '../../../iproute/monitor';
import type { Observed } from '../kernel-watch';
import { planPeers, programmed, type Actual, type Peer } from './peers';
import type { PeerIndex } from './peer-index';

export interface Drift {
  /** The peer subnets whose entries differ from what was programmed. */
  keys: Set<string>;
  /**
   * `actual` (what was programmed for the peers at `keys`) with what the
   * kernel reported of them, and the entries it reported that no peer
   * explains (a route added by hand: planned away as a full pass would).
   */
  overlay(actual: Actual, keys: ReadonlySet<string>): Actual;
}

/** One reported entry, with the peer subnet it concerns (none: no peer's). */
interface Seen {
  key?: string;
  event: NeighEvent | RouteEvent | FdbEvent;
}

/**
 * The drift of VTEP `dev` in `seen`: `before` is what the last pass
 * programmed (by subnet), `index` the peers wanted, `direct` DirectRouting's
 * connected subnets.
 */
export function driftOf(seen: Observed, before: ReadonlyMap<string, Peer>, index: PeerIndex, dev: string, network: Prefix, direct: readonly Prefix[]): Drift {
  const keys = new Set<string>();
  const all: Seen[] = [];
  const peerAt = (k: string) => before.get(k) ?? index.wanted(k);
  for (const [addr, event] of seen.neigh) {
    const ip = IP.parse(addr);
    const key = ip ? index.keysHolding(ip).find((k) => peerAt(k)?.vtepIP === addr) : undefined;
    all.push({ key, event });
  }
  for (const [mac, event] of seen.fdb) all.push({ key: index.keysOfMac(mac).find((k) => peerAt(k)?.mac === mac), event });
  for (const [dst, event] of seen.routes) all.push({ key: peerAt(dst) ? dst : undefined, event });

  for (const s of all) {
    if (s.key === undefined || keys.has(s.key)) continue;
    const p = before.get(s.key);
    // programmed, and the kernel says so: nothing to do (our own commands' events end here)
    if (p && planPeers([p], apply(programmed([p], direct), [s], dev), dev, network, direct).changes.length === 0) continue;
    keys.add(s.key);
  }
  return {
    keys,
    overlay: (actual, planned) => apply(actual, all.filter((s) => (s.key === undefined ? !s.event.deleted : planned.has(s.key))), dev),
  };
}

/** `actual` with each reported entry in place of the one it had at that address, MAC or destination (gone when deleted). */
function apply(actual: Actual, seen: readonly Seen[], dev: string): Actual {
  if (!seen.length) return actual;
  const out: Required<Actual> = { neigh: [...actual.neigh], fdb: [...actual.fdb], routes: [...actual.routes], direct: [...(actual.direct ?? [])] };
  for (const { event: e } of seen) {
    if (e.kind === 'neigh') {
      out.neigh = out.neigh.filter((n) => IP.parse(n.dst)?.toString() !== IP.parse(e.entry.dst)?.toString());
      if (!e.deleted) out.neigh.push(e.entry);
    } else if (e.kind === 'fdb') {
      out.fdb = out.fdb.filter((f) => f.mac.toLowerCase() !== e.entry.mac.toLowerCase());
      if (!e.deleted) out.fdb.push(e.entry);
    } else {
      const onVtep = e.route.dev === dev;
      const same = (r: { dst: string }) => sameDst(r.dst, e.route.dst);
      if (onVtep) out.routes = out.routes.filter((r) => !same(r));
      else out.direct = out.direct.filter((r) => !same(r));
      // a route on the VTEP is listed without its device, as `ip route show dev` lists them
      if (!e.deleted) (onVtep ? out.routes : out.direct).push(onVtep ? { ...e.route, dev: undefined } : e.route);
    }
  }
  return out;
}

const asPrefix = (dst: string) => Prefix.parse(dst.includes('/') ? dst : `${dst}/${dst.includes(':') ? 128 : 32}`)?.toString();
const sameDst = (a: string, b: string) => asPrefix(a) === asPrefix(b);
