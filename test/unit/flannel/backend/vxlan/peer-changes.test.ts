// A changes pass plans the peers against what an earlier plan programmed
// (planPeers on `programmed(before)`, no kernel read: what network.ts does for
// the peers a change involves). Checked by applying the lines to a model of
// the VTEP's tables: from `before` programmed, they must leave exactly
// `after` programmed, whatever changed.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { Prefix } from '../../../../../src/net/ip';
import type { Line } from '../../../../../src/iproute/batch';
import { Peer, Plan, planPeers, programmed } from '../../../../../src/flannel/backend/vxlan/peers';

const net = Prefix.parse('10.88.0.0/16')!;
const DEV = 'flannel.1';

interface Tables {
  neigh: Map<string, string>;
  fdb: Map<string, Set<string>>;
  routes: Map<string, string>;
}

function tablesOf(peers: readonly Peer[]): Tables {
  const t: Tables = { neigh: new Map(), fdb: new Map(), routes: new Map() };
  for (const p of peers) {
    t.neigh.set(p.vtepIP, p.mac);
    t.fdb.set(p.mac, new Set([p.publicIP]));
    t.routes.set(p.subnet.toString(), p.vtepIP);
  }
  return t;
}

/** Applies a plan's lines in its order, as the kernel would. */
function apply(t: Tables, plan: Plan): void {
  const run = (l: Line) => {
    const [obj, verb, a, , b] = l;
    if (obj === 'neigh') verb === 'del' ? t.neigh.delete(a) : t.neigh.set(a, b);
    else if (obj === 'fdb') {
      if (verb === 'replace') t.fdb.set(a, new Set([b]));
      else {
        t.fdb.get(a)?.delete(b);
        if (!t.fdb.get(a)?.size) t.fdb.delete(a);
      }
    } else if (obj === 'route') verb === 'del' ? t.routes.delete(a) : t.routes.set(a, l[l.indexOf('via') + 1]);
  };
  [...plan.ipFirst, ...plan.bridge, ...plan.ipLast].forEach(run);
}

const norm = (t: Tables) => ({
  neigh: [...t.neigh].sort(),
  fdb: [...t.fdb].map(([m, s]) => [m, [...s].sort()]).sort(),
  routes: [...t.routes].sort(),
});

/** Peers on subnets 10.88.<n>.0/24; a node's MAC and address follow `node` (two leases of one node share them). */
const peer = (n: number, node: number, gen: number): Peer => ({
  subnet: Prefix.parse(`10.88.${n}.0/24`)!,
  vtepIP: `10.88.${n}.0`,
  mac: `0a:00:00:00:${gen.toString(16).padStart(2, '0')}:${node.toString(16).padStart(2, '0')}`,
  publicIP: `192.168.${gen}.${node}`,
});
const peerSet = fc
  .uniqueArray(fc.record({ n: fc.integer({ min: 2, max: 40 }), node: fc.integer({ min: 1, max: 30 }), gen: fc.integer({ min: 0, max: 2 }) }), { selector: (p) => p.n, maxLength: 25 })
  .map((ps) => {
    // one MAC per node: the same (mac, publicIP) pair wherever a node appears (as desiredPeers guarantees)
    const genOf = new Map<number, number>();
    return ps.map((p) => {
      if (!genOf.has(p.node)) genOf.set(p.node, p.gen);
      return peer(p.n, p.node, genOf.get(p.node)!);
    });
  });

/** The plan that takes the peers from `before`, as programmed, to `after`. */
const planChanges = (before: readonly Peer[], after: readonly Peer[], dev: string, network: Prefix, direct: readonly Prefix[] = []): Plan =>
  planPeers(after, programmed(before, direct), dev, network, direct);

describe('planning against what was programmed', () => {
  it('takes any programmed peer set to any other, exactly', () => {
    fc.assert(
      fc.property(peerSet, peerSet, (before, after) => {
        const t = tablesOf(before);
        apply(t, planChanges(before, after, DEV, net));
        expect(norm(t)).toEqual(norm(tablesOf(after)));
      }),
      { numRuns: 300 },
    );
  });
  it('plans nothing when nothing changed, and what a full plan would when one peer changed', () => {
    const before = Array.from({ length: 50 }, (_, i) => peer(i + 2, i + 1, 0));
    expect(planChanges(before, before, DEV, net).changes).toEqual([]);
    const after = before.map((p, i) => (i === 7 ? { ...p, mac: '0a:00:00:00:09:09' } : p));
    const plan = planChanges(before, after, DEV, net);
    expect(plan.changes).toEqual(['neigh 10.88.9.0 → 0a:00:00:00:09:09: was 0a:00:00:00:00:08 PERMANENT', 'fdb 0a:00:00:00:09:09 → 192.168.0.8: added', 'fdb 0a:00:00:00:00:08 → 192.168.0.8: removed (no lease)']);
  });
  it('DirectRouting: a peer moving onto a connected subnet trades its VXLAN entries for a direct route', () => {
    const direct = [Prefix.parse('192.168.1.0/24')!];
    const before = [peer(2, 1, 0), peer(3, 2, 0)];
    const after = [peer(2, 1, 1), peer(3, 2, 0)];
    const plan = planChanges(before, after, DEV, net, direct);
    expect(plan.changes).toEqual([
      'route 10.88.2.0/24 via 192.168.1.1 (direct): added',
      'route 10.88.2.0/24: removed (no lease)',
      'fdb 0a:00:00:00:00:01 → 192.168.0.1: removed (no lease)',
      'neigh 10.88.2.0 → 0a:00:00:00:00:01: removed (no lease)',
    ]);
    expect(planChanges(after, after, DEV, net, direct).changes).toEqual([]);
  });
});

describe('a peer index reset', () => {
  it('judges only the lease objects it did not hold: a reset after one change reads one lease', async () => {
    const { PeerIndex, desiredPeers } = await import('../../../../../src/flannel/backend/vxlan/peer-index');
    const { IP } = await import('../../../../../src/net/ip');
    let reads = 0;
    const lease = (n: number) => {
      const attrs = { backendType: 'vxlan', vni: 1, publicIP: IP.parse(`192.168.0.${n}`)!, vtepMAC: `0a:00:00:00:00:${n.toString(16).padStart(2, '0')}` };
      return { subnet: Prefix.parse(`10.88.${n}.0/24`)!, get attrs() { reads++; return attrs; } };
    };
    const self = { subnet: Prefix.parse('10.88.1.0/24')!, vni: 1 };
    const leases = Array.from({ length: 50 }, (_, i) => lease(i + 2));
    const index = new PeerIndex(self, net);
    const first = index.reset(leases);
    expect(first.peers).toHaveLength(50);
    const afterFirst = reads;
    const changed = [...leases.slice(0, 49), lease(99)];
    const second = index.reset(changed);
    expect(second.peers.map((p) => p.key)).toContain('10.88.99.0/24');
    expect(second.peers.map((p) => p.key)).not.toContain('10.88.51.0/24');
    expect(reads - afterFirst).toBeLessThanOrEqual(8); // the new lease's attributes only (a few fields of one object)
    expect(desiredPeers(changed, self, net).peers).toEqual(second.peers); // the same answer from a fresh index
  });
});
