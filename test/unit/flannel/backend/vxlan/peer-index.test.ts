// PeerIndex: the peers a VTEP wants, kept lease by lease. Checked against
// desiredPeers (the whole list judged at once): from any set of leases to any
// other, applying the leases that left and came gives the same peers, and
// the keys it returns hold every subnet whose wanted peer changed; leases
// that did not change are not judged again.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { IP, Prefix } from '../../../../../src/net/ip';
import type { Lease } from '../../../../../src/flannel/lease';
import type { Peer } from '../../../../../src/flannel/backend/vxlan/peers';
import { PeerIndex, desiredPeers } from '../../../../../src/flannel/backend/vxlan/peer-index';

const net = Prefix.parse('10.88.0.0/16')!;
const self = { subnet: Prefix.parse('10.88.1.0/24')!, publicIP: IP.parse('192.168.0.1')!, vni: 1, mac: '0a:00:00:00:ff:ff' };

/** A lease on 10.88.<n>.0/24 advertising node `node`'s MAC from address `ip` (a MAC shared across addresses is a conflict). */
const lease = (n: number, node: number, ip: number): Lease => ({
  subnet: Prefix.parse(`10.88.${n}.0/24`)!,
  attrs: { backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:00:00:${node.toString(16).padStart(2, '0')}`, publicIP: IP.parse(`192.168.${ip}.${node}`)! },
});
const wantedByKey = (peers: readonly Peer[]) => new Map(peers.map((p) => [p.subnet.toString(), `${p.mac} ${p.publicIP}`]));

/** Lease specs on distinct subnets; nodes 1..6 and addresses 0..1, so that MACs are shared and sometimes disputed. */
const specs = fc.uniqueArray(fc.record({ n: fc.integer({ min: 1, max: 30 }), node: fc.integer({ min: 1, max: 6 }), ip: fc.integer({ min: 0, max: 1 }) }), { selector: (s) => s.n, maxLength: 20 });

describe('PeerIndex', () => {
  it('after any change, wants what desiredPeers wants of the new list, and names every subnet whose peer changed', () => {
    fc.assert(
      fc.property(specs, specs, (a, b) => {
        // leases that did not change are the same objects in both lists, as the managers hand them out
        const objects = new Map<string, Lease>();
        const obj = (s: { n: number; node: number; ip: number }) => {
          const k = `${s.n}/${s.node}/${s.ip}`;
          if (!objects.has(k)) objects.set(k, lease(s.n, s.node, s.ip));
          return objects.get(k)!;
        };
        const before = a.map(obj);
        const after = b.map(obj);
        const index = new PeerIndex(self, net);
        const reset = index.reset(before);
        expect(wantedByKey(reset.peers)).toEqual(wantedByKey(desiredPeers(before, self, net).peers));
        const wasWanted = wantedByKey(reset.peers);
        const { removed, added } = index.diff(after);
        const { keys } = index.apply(removed, added);
        const want = wantedByKey(desiredPeers(after, self, net).peers);
        for (const k of new Set([...want.keys(), ...wasWanted.keys(), ...keys])) {
          const p = index.wanted(k);
          expect(p ? `${p.mac} ${p.publicIP}` : undefined).toBe(want.get(k));
          if (want.get(k) !== wasWanted.get(k)) expect(keys.has(k)).toBe(true);
        }
        expect(index.size).toBe(after.length);
      }),
      { numRuns: 500 },
    );
  });

  it('judges only the leases that changed: the others are not read again', () => {
    const leases = Array.from({ length: 200 }, (_, i) => lease(i + 2, i + 2, 0));
    const index = new PeerIndex(self, net);
    expect(index.reset(leases).peers).toHaveLength(200);
    let reads = 0;
    const watched = leases.map((l) => new Proxy(l, { get: (t, p) => (reads++, Reflect.get(t, p)) }));
    const index2 = new PeerIndex(self, net);
    index2.reset(watched);
    reads = 0;
    const changed = lease(9, 250, 1);
    const { keys } = index2.apply([watched[7]], [changed]);
    expect([...keys]).toEqual(['10.88.9.0/24']);
    expect(index2.wanted('10.88.9.0/24')).toMatchObject({ mac: '0a:00:00:00:00:fa', publicIP: '192.168.1.250' });
    expect(reads).toBe(0); // the removed lease's verdict is remembered; no other lease is looked at
  });

  it('a MAC advertised for two addresses: both skipped, said so; the dispute ends when one goes', () => {
    const index = new PeerIndex(self, net);
    const a = lease(2, 5, 0);
    const b = lease(3, 5, 1);
    index.reset([a]);
    const came = index.apply([], [b]);
    expect([...came.keys].sort()).toEqual(['10.88.2.0/24', '10.88.3.0/24']);
    expect(came.skipped).toEqual([
      'lease 10.88.2.0/24: BackendData.VtepMAC 0a:00:00:00:00:05 is also advertised by lease 10.88.3.0/24: neither is programmed',
      'lease 10.88.3.0/24: BackendData.VtepMAC 0a:00:00:00:00:05 is also advertised by lease 10.88.2.0/24: neither is programmed',
    ]);
    expect([index.wanted('10.88.2.0/24'), index.wanted('10.88.3.0/24')]).toEqual([undefined, undefined]);
    const gone = index.apply([b], []);
    expect([...gone.keys].sort()).toEqual(['10.88.2.0/24', '10.88.3.0/24']);
    expect(index.wanted('10.88.2.0/24')).toMatchObject({ publicIP: '192.168.0.5' });
  });
});
