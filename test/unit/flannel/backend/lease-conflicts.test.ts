// Leases judged against each other and against this node: an overlapping
// lease (the same subnet, or one inside another) never takes the traffic of
// the established one, in either backend; a public address that is not
// another host's unicast address is never a destination; the stores refuse a
// lease of another size than SubnetLen.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { IP, Prefix } from '../../../../src/net/ip';
import type { Lease, LeaseAttrs } from '../../../../src/flannel/lease';
import { PeerIndex, desiredPeers } from '../../../../src/flannel/backend/vxlan/peer-index';
import { planPeers, type Actual } from '../../../../src/flannel/backend/vxlan/peers';
import { RouteIndex, desiredRoutes } from '../../../../src/flannel/backend/host-gw/routes';
import { publicAddressProblem } from '../../../../src/flannel/backend/public-address';
import { StoreManager } from '../../../../src/flannel/store/store-manager';
import { parseNetworkConfig } from '../../../../src/flannel/netconfig';
import { encodeAttrs } from '../../../../src/flannel/lease';
import { MemStore } from '../../../support/mem-store';

const P = (s: string) => Prefix.parse(s)!;
const ip = (s: string) => IP.parse(s)!;
const NET = P('10.99.0.0/16');
const self = { subnet: P('10.99.1.0/24'), publicIP: ip('192.168.99.1'), vni: 1 };
let macs = 0;
const hex = (n: number) => (n & 255).toString(16).padStart(2, '0');
/** A vxlan lease of node `node` (its own MAC and address unless given). */
const vx = (subnet: string, node: string, extra: Partial<Lease> = {}, attrs: Partial<LeaseAttrs> = {}): Lease => {
  const n = ++macs;
  return {
    subnet: P(subnet),
    node,
    attrs: { backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:${hex(n >> 16)}:${hex(n >> 8)}:${hex(n)}`, publicIP: ip(`172.${16 + ((n >> 16) & 15)}.${(n >> 8) & 255}.${n & 255}`), ...attrs },
    ...extra,
  };
};
const hg = (subnet: string, node: string, gateway: string, extra: Partial<Lease> = {}): Lease => ({ subnet: P(subnet), node, attrs: { backendType: 'host-gw', publicIP: ip(gateway) }, ...extra });

describe('an overlapping lease (vxlan)', () => {
  it('inside an established one is not programmed, and the log names both; the established peer keeps its neighbour and route', () => {
    const n2 = vx('10.99.2.0/24', 'n2');
    const index = new PeerIndex(self, NET);
    expect(index.reset([n2]).peers.map((p) => p.key)).toEqual(['10.99.2.0/24']);
    for (const rogue of [vx('10.99.2.128/25', 'n9'), vx('10.99.2.0/25', 'n8')]) {
      const { keys, skipped } = index.apply([], [rogue]);
      expect([...keys].sort()).toEqual(['10.99.2.0/24', rogue.subnet!.toString()]);
      expect(skipped).toEqual([`lease ${rogue.subnet} (node "${rogue.node}"): overlaps lease 10.99.2.0/24 (node "n2"), which was there first: not programmed`]);
      expect(index.wanted('10.99.2.0/24')?.mac).toBe(n2.attrs.vtepMAC);
      expect(index.wanted(rogue.subnet!.toString())).toBeUndefined();
      // the pass that follows changes nothing of n2's entries (10.99.2.0/25 would have taken its neighbour 10.99.2.0)
      const want = [...keys].map((k) => index.wanted(k)).filter((p) => !!p);
      const programmed: Actual = {
        neigh: [{ dst: '10.99.2.0', lladdr: n2.attrs.vtepMAC, state: ['PERMANENT'] }],
        fdb: [{ mac: n2.attrs.vtepMAC!, dst: n2.attrs.publicIP!.toString(), flags: ['self'], state: 'permanent' }],
        routes: [{ dst: '10.99.2.0/24', gateway: '10.99.2.0', flags: ['onlink'] }],
      };
      expect(planPeers(want, programmed, 'flannel.1', NET).changes).toEqual([]);
    }
  });

  it('covering an established one (a /16 over the /24s) is not programmed either', () => {
    const a = vx('10.99.130.0/24', 'a');
    const b = vx('10.99.131.0/24', 'b');
    const { peers, skipped } = desiredPeers([a, b, vx('10.99.128.0/17', 'wide')], self, NET);
    expect(peers.map((p) => p.key)).toEqual(['10.99.130.0/24', '10.99.131.0/24']);
    expect(skipped).toEqual(['lease 10.99.128.0/17 (node "wide"): overlaps lease 10.99.130.0/24 (node "a"), which was there first: not programmed']);
  });

  it('on the same subnet as an established one (two Nodes with one pod CIDR) is not programmed; the established one keeps it', () => {
    const first = vx('10.99.5.0/24', 'first');
    const second = vx('10.99.5.0/24', 'second');
    expect(desiredPeers([first, second], self, NET).peers.map((p) => p.mac)).toEqual([first.attrs.vtepMAC]);
  });

  it('the older Node is the established one whatever the order it is listed in (a restart lists by name)', () => {
    const old = vx('10.99.2.0/24', 'zz-old', { since: Date.parse('2026-01-01T00:00:00Z') });
    const young = vx('10.99.2.128/25', 'aa-young', { since: Date.parse('2026-11-01T00:00:00Z') });
    const { peers, skipped } = desiredPeers([young, old], self, NET);
    expect(peers.map((p) => p.key)).toEqual(['10.99.2.0/24']);
    expect(skipped[0]).toMatch(/^lease 10.99.2.128\/25 \(node "aa-young"\): overlaps lease 10.99.2.0\/24 \(node "zz-old"\)/);
  });

  it('once the established lease goes, the other is programmed; a lease rewritten in place stays the established one', () => {
    const n2 = vx('10.99.2.0/24', 'n2');
    const rogue = vx('10.99.2.0/24', 'rogue');
    const index = new PeerIndex(self, NET);
    index.reset([n2, rogue]);
    const n2Again = { ...n2, attrs: { ...n2.attrs, vtepMAC: '0a:00:00:00:aa:02' } }; // its VTEP made again: a new lease object
    expect(index.apply([n2], [n2Again]).keys).toEqual(new Set(['10.99.2.0/24']));
    expect(index.wanted('10.99.2.0/24')?.mac).toBe('0a:00:00:00:aa:02');
    const gone = index.apply([n2Again], []);
    expect(gone.keys).toEqual(new Set(['10.99.2.0/24']));
    expect(index.wanted('10.99.2.0/24')?.mac).toBe(rogue.attrs.vtepMAC);
  });

  // Random leases of /22 to /26 in 10.99.0.0/16, added and removed in random steps
  const step = fc.record({ add: fc.array(fc.record({ third: fc.integer({ min: 2, max: 12 }), len: fc.integer({ min: 22, max: 26 }), fourth: fc.integer({ min: 0, max: 3 }) }), { maxLength: 4 }), removeSome: fc.array(fc.nat(), { maxLength: 3 }) });
  const leaseOf = (s: { third: number; len: number; fourth: number }, i: number) => vx(Prefix.of(ip(`10.99.${s.third}.${s.fourth * 64}`), s.len).toString(), `r${i}`);
  for (const [backend, make] of [
    ['vxlan', () => new PeerIndex(self, NET)],
    ['host-gw', () => new RouteIndex(self, NET)],
  ] as const) {
    it(`${backend}: whatever comes and goes, no two wanted peers overlap, and a wanted lease keeps its traffic until it goes`, () => {
      fc.assert(
        fc.property(fc.array(step, { minLength: 1, maxLength: 8 }), (steps) => {
          const index = make();
          const held: Lease[] = [];
          let n = 0;
          const asHostGw = (l: Lease): Lease => (backend === 'host-gw' ? { ...l, attrs: { backendType: 'host-gw', publicIP: l.attrs.publicIP } } : l);
          const wanted = () => {
            const out = new Map<string, Lease>();
            for (const l of held) {
              const key = l.subnet!.toString();
              const p = index.wanted(key) as { gateway?: string; publicIP?: string } | undefined;
              const gw = p?.gateway ?? p?.publicIP;
              if (gw === l.attrs.publicIP!.toString()) out.set(key, l);
            }
            return out;
          };
          index.reset([]);
          for (const s of steps) {
            const before = wanted();
            const removed = s.removeSome.map((r) => held[r % Math.max(1, held.length)]).filter((l, i, all) => l && all.indexOf(l) === i);
            for (const l of removed) held.splice(held.indexOf(l), 1);
            const added = s.add.map((a) => asHostGw(leaseOf(a, n++)));
            held.push(...added);
            index.apply(removed, added);
            const now = wanted();
            const prefixes = [...now.keys()].map(P);
            for (let i = 0; i < prefixes.length; i++) for (let j = i + 1; j < prefixes.length; j++) expect(prefixes[i].overlaps(prefixes[j])).toBe(false);
            for (const [key, l] of before) if (!removed.includes(l)) expect(now.get(key)).toBe(l);
          }
        }),
        { numRuns: 300 },
      );
    });
  }
});

describe('an overlapping lease (host-gw)', () => {
  it('inside an established one gets no route; the log names both', () => {
    const { peers, skipped } = desiredRoutes([hg('10.99.2.0/24', 'n2', '192.168.99.2'), hg('10.99.2.128/25', 'n9', '192.168.99.9')], self, NET);
    expect(peers).toEqual([{ subnet: P('10.99.2.0/24'), gateway: '192.168.99.2', node: 'n2' }]);
    expect(skipped).toEqual(['lease 10.99.2.128/25 (node "n9"): overlaps lease 10.99.2.0/24 (node "n2"), which was there first: not programmed']);
  });
});

describe('a peer\'s public address', () => {
  const ctx = { publicIP: ip('192.168.99.1'), own: [ip('192.168.99.1'), ip('10.0.0.7'), ip('fd00::7')], underlay: [P('192.168.99.0/24'), P('fd00:99::/64')] };
  it('is refused unless it is another host\'s unicast address', () => {
    const refused: [string, string][] = [
      ['127.0.0.1', 'is a loopback address'],
      ['0.0.0.0', 'is unspecified'],
      ['224.0.0.1', 'is a multicast address'],
      ['239.1.2.3', 'is a multicast address'],
      ['255.255.255.255', 'is the broadcast address'],
      ['240.0.0.1', 'is a reserved address'],
      ['169.254.1.1', 'is a link-local address'],
      ['192.168.99.255', 'is the broadcast address of the underlay\'s subnet 192.168.99.0/24'],
      ['10.0.0.7', 'is an address of this node'],
      ['::1', 'is a loopback address'],
      ['::', 'is unspecified'],
      ['ff02::1', 'is a multicast address'],
      ['fe80::1', 'is a link-local address'],
      ['fd00::7', 'is an address of this node'],
    ];
    for (const [addr, why] of refused) expect(publicAddressProblem(ip(addr), ctx), addr).toBe(why);
    for (const addr of ['192.168.99.2', '192.168.100.255', '10.1.2.3', 'fd00:99::2', '2001:db8::1']) expect(publicAddressProblem(ip(addr), ctx), addr).toBeUndefined();
  });

  it('may be link-local when this node\'s own underlay address is', () => {
    expect(publicAddressProblem(ip('169.254.3.4'), { publicIP: ip('169.254.3.1') })).toBeUndefined();
    expect(publicAddressProblem(ip('fe80::4'), { publicIP: ip('fe80::1') })).toBeUndefined();
  });

  it('is judged in both backends: such a lease is never a destination, and says why once per lease', () => {
    const bad = [vx('10.99.7.0/24', 'lo', {}, { publicIP: ip('127.0.0.1') }), vx('10.99.8.0/24', 'bc', {}, { publicIP: ip('255.255.255.255') }), vx('10.99.9.0/24', 'me', {}, { publicIP: ip('10.0.0.7') })];
    const vxlan = desiredPeers([...bad, vx('10.99.2.0/24', 'ok')], { ...self, ...ctx }, NET);
    expect(vxlan.peers.map((p) => p.key)).toEqual(['10.99.2.0/24']);
    expect(vxlan.skipped).toEqual([
      'lease 10.99.7.0/24: PublicIP 127.0.0.1 is a loopback address',
      'lease 10.99.8.0/24: PublicIP 255.255.255.255 is the broadcast address',
      'lease 10.99.9.0/24: PublicIP 10.0.0.7 is an address of this node',
    ]);
    const routes = desiredRoutes([hg('10.99.7.0/24', 'm', '224.0.0.1'), hg('10.99.2.0/24', 'ok', '192.168.99.2')], { subnet: self.subnet, ...ctx }, NET);
    expect(routes.peers.map((p) => p.gateway)).toEqual(['192.168.99.2']);
    expect(routes.skipped).toEqual(['lease 10.99.7.0/24: PublicIP 224.0.0.1 is a multicast address']);
  });
});

describe('the stores', () => {
  it('refuse a lease whose subnet is not of the network config\'s SubnetLen (a /25 inside a node\'s /24)', async () => {
    const store = new MemStore();
    store.config = '{"Network":"10.99.0.0/16","SubnetLen":24,"Backend":{"Type":"vxlan"}}';
    const attrs = (n: number) => encodeAttrs({ backendType: 'vxlan', publicIP: ip(`192.168.99.${n}`), vni: 1, vtepMAC: `0a:00:00:00:00:0${n}` });
    store.put('10.99.2.0-24', attrs(2), 600);
    store.put('10.99.2.128-25', attrs(9), 600);
    const m = new StoreManager(store, { leaseTtlS: 600 });
    await m.getNetworkConfig();
    const list = await m.listLeases();
    expect(list.leases.map((l) => l.subnet!.toString())).toEqual(['10.99.2.0/24']);
    expect(list.bad).toEqual([{ key: '10.99.2.128-25', why: 'its subnet 10.99.2.128/25 is not of the network config\'s SubnetLen 24: not programmed' }]);
    expect(parseNetworkConfig(store.config).v4!.subnetLen).toBe(24);
  });
});
