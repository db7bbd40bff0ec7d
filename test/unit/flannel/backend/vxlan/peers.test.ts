import { afterEach, describe, expect, it } from 'vitest';
import { IP, Prefix } from '../../../../../src/net/ip';
import { Actual, PlanError, applyPlan, applyPlans, planPeers } from '../../../../../src/flannel/backend/vxlan/peers';
import { desiredPeers } from '../../../../../src/flannel/backend/vxlan/peer-index';
import { FakeKernel } from '../../../../support/fake-kernel';
import { Lease, LeaseAttrs } from '../../../../../src/flannel/lease';

const P = (s: string) => Prefix.parse(s)!;
const net = P('10.88.0.0/16');
const self = { subnet: P('10.88.1.0/24'), publicIP: IP.parse('192.168.88.1')!, vni: 1 };
const lease = (subnet: string, ip: string, mac: string, extra: Partial<LeaseAttrs> = {}): Lease => ({
  subnet: P(subnet),
  attrs: { publicIP: IP.parse(ip)!, backendType: 'vxlan', vni: 1, vtepMAC: mac, ...extra },
});
const empty: Actual = { neigh: [], fdb: [], routes: [] };
const A = lease('10.88.2.0/24', '192.168.88.2', '0a:00:00:00:00:02');
const B = lease('10.88.3.0/24', '192.168.88.3', '0a:00:00:00:00:03');
const programmed = (mac = A.attrs.vtepMAC!, ip = '192.168.88.2'): Actual => ({
  neigh: [{ dst: '10.88.2.0', lladdr: mac, state: ['PERMANENT'] }],
  fdb: [{ mac, dst: ip, flags: ['self'], state: 'permanent' }],
  routes: [{ dst: '10.88.2.0/24', gateway: '10.88.2.0', flags: ['onlink'] }],
});

describe('desired peers', () => {
  it('skips our own lease, other backends, other VNIs, our PublicIP, outside the network, without a MAC', () => {
    const { peers, skipped } = desiredPeers(
      [
        lease('10.88.1.0/24', '192.168.88.1', '0a:00:00:00:00:01'),
        A,
        lease('10.88.4.0/24', '192.168.88.4', '0a:00:00:00:00:04', { backendType: 'host-gw' }),
        lease('10.88.5.0/24', '192.168.88.5', '0a:00:00:00:00:05', { vni: 2 }),
        lease('10.88.6.0/24', '192.168.88.1', '0a:00:00:00:00:06'),
        lease('10.99.0.0/24', '192.168.88.7', '0a:00:00:00:00:07'),
        lease('10.88.8.0/24', '192.168.88.8', undefined as unknown as string),
      ],
      self,
      net,
    );
    expect(peers.map((p) => p.subnet.toString())).toEqual(['10.88.2.0/24']);
    expect(skipped).toHaveLength(5);
  });
});

describe('VTEP MACs that would hijack traffic', () => {
  const selfMac = { ...self, mac: '0a:00:00:00:00:01' };
  it('a lease advertising our own VTEP MAC is skipped', () => {
    const { peers, skipped } = desiredPeers([A, lease('10.88.9.0/24', '192.168.88.9', '0A:00:00:00:00:01')], selfMac, net);
    expect(peers.map((p) => p.subnet.toString())).toEqual(['10.88.2.0/24']);
    expect(skipped).toEqual(['lease 10.88.9.0/24: BackendData.VtepMAC 0a:00:00:00:00:01 is this node\'s own VTEP MAC']);
  });
  it('a MAC copied onto many nodes: each skipped lease names three of the others and counts the rest (lines stay short)', () => {
    const copies = Array.from({ length: 200 }, (_, i) => lease(`10.88.${i + 10}.0/24`, `192.168.89.${i + 1}`, '0a:00:00:00:00:77'));
    const { peers, skipped } = desiredPeers([A, ...copies], selfMac, net);
    expect(peers.map((p) => p.subnet.toString())).toEqual(['10.88.2.0/24']);
    expect(skipped).toHaveLength(200);
    expect(skipped[0]).toBe('lease 10.88.10.0/24: BackendData.VtepMAC 0a:00:00:00:00:77 is also advertised by lease 10.88.11.0/24, lease 10.88.12.0/24, lease 10.88.13.0/24 and 196 more: neither is programmed');
    expect(Math.max(...skipped.map((l) => l.length))).toBeLessThan(200);
  });
  it('two leases with one MAC for different nodes: neither is programmed (which one is real cannot be told)', () => {
    const thief = lease('10.88.9.0/24', '192.168.88.9', A.attrs.vtepMAC!);
    const { peers, skipped } = desiredPeers([A, B, thief], selfMac, net);
    expect(peers.map((p) => p.subnet.toString())).toEqual(['10.88.3.0/24']);
    expect(skipped).toEqual([
      'lease 10.88.2.0/24: BackendData.VtepMAC 0a:00:00:00:00:02 is also advertised by lease 10.88.9.0/24: neither is programmed',
      'lease 10.88.9.0/24: BackendData.VtepMAC 0a:00:00:00:00:02 is also advertised by lease 10.88.2.0/24: neither is programmed',
    ]);
    // and a hijacker that was programmed before loses its FDB entry, the victim's stays out of the FDB
    const plan = planPeers(peers, programmed(), 'flannel.1', net);
    expect(plan.bridge).toContainEqual(['fdb', 'del', '0a:00:00:00:00:02', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self']);
  });
  it('two leases of one node (same MAC, same PublicIP) both stay', () => {
    const second = lease('10.88.9.0/24', '192.168.88.2', A.attrs.vtepMAC!);
    expect(desiredPeers([A, second], selfMac, net).peers.map((p) => p.subnet.toString())).toEqual(['10.88.2.0/24', '10.88.9.0/24']);
  });
  it('multicast and all-zero MACs are refused', () => {
    const { peers, skipped } = desiredPeers(
      [lease('10.88.8.0/24', '192.168.88.8', '01:00:5e:00:00:01'), lease('10.88.9.0/24', '192.168.88.9', '00:00:00:00:00:00'), lease('10.88.7.0/24', '192.168.88.7', 'ff:ff:ff:ff:ff:ff')],
      selfMac,
      net,
    );
    expect(peers).toEqual([]);
    expect(skipped).toEqual([
      'lease 10.88.8.0/24: BackendData.VtepMAC 01:00:5e:00:00:01 is not a unicast MAC',
      'lease 10.88.9.0/24: BackendData.VtepMAC 00:00:00:00:00:00 is not a unicast MAC',
      'lease 10.88.7.0/24: BackendData.VtepMAC ff:ff:ff:ff:ff:ff is not a unicast MAC',
    ]);
  });
});

describe('planning peers', () => {
  it('a new peer: neighbour, then FDB, then route, all replace', () => {
    const { peers } = desiredPeers([A], self, net);
    const plan = planPeers(peers, empty, 'flannel.1', net);
    expect(plan.ipFirst).toEqual([['neigh', 'replace', '10.88.2.0', 'lladdr', '0a:00:00:00:00:02', 'dev', 'flannel.1', 'nud', 'permanent']]);
    expect(plan.bridge).toEqual([['fdb', 'replace', '0a:00:00:00:00:02', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self', 'permanent']]);
    expect(plan.ipLast).toEqual([['route', 'replace', '10.88.2.0/24', 'via', '10.88.2.0', 'dev', 'flannel.1', 'onlink']]);
  });
  it('nothing to do when the kernel matches', () => {
    const plan = planPeers(desiredPeers([A], self, net).peers, programmed(), 'flannel.1', net);
    expect(plan.changes).toEqual([]);
  });
  it('a removed peer: route, then FDB, then neighbour go', () => {
    const plan = planPeers([], programmed(), 'flannel.1', net);
    expect(plan.ipFirst).toEqual([['route', 'del', '10.88.2.0/24', 'dev', 'flannel.1']]);
    expect(plan.bridge).toEqual([['fdb', 'del', '0a:00:00:00:00:02', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self']]);
    expect(plan.ipLast).toEqual([['neigh', 'del', '10.88.2.0', 'dev', 'flannel.1']]);
  });
  it('a peer\'s MAC changed: neighbour replaced, new FDB entry, the stale one removed, route kept', () => {
    const moved = lease('10.88.2.0/24', '192.168.88.2', '0a:00:00:00:00:99');
    const plan = planPeers(desiredPeers([moved], self, net).peers, programmed(), 'flannel.1', net);
    expect(plan.ipFirst).toEqual([['neigh', 'replace', '10.88.2.0', 'lladdr', '0a:00:00:00:00:99', 'dev', 'flannel.1', 'nud', 'permanent']]);
    expect(plan.bridge).toEqual([
      ['fdb', 'replace', '0a:00:00:00:00:99', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self', 'permanent'],
      ['fdb', 'del', '0a:00:00:00:00:02', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self'],
    ]);
    expect(plan.ipLast).toEqual([]);
  });
  it('a peer\'s IP changed: the one FDB entry is rewritten in place', () => {
    const plan = planPeers(desiredPeers([A], self, net).peers, programmed(A.attrs.vtepMAC, '192.168.88.42'), 'flannel.1', net);
    expect(plan.bridge).toEqual([['fdb', 'replace', '0a:00:00:00:00:02', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self', 'permanent']]);
  });
  it('hand-made drift: a wrong route gateway, an appended FDB remote, unknown entries; foreign routes left alone', () => {
    const actual: Actual = {
      neigh: [
        { dst: '10.88.2.0', lladdr: '0a:00:00:00:00:02', state: ['PERMANENT'] },
        { dst: '10.88.77.0', lladdr: '0a:00:00:00:00:77', state: ['PERMANENT'] },
        { dst: '10.88.78.0', state: ['FAILED'] },
      ],
      fdb: [
        { mac: '0a:00:00:00:00:02', dst: '192.168.88.2', state: 'permanent' },
        { mac: '0a:00:00:00:00:02', dst: '192.168.88.50', state: 'permanent' },
        { mac: '0a:00:00:00:00:77', dst: '192.168.88.77', state: 'permanent' },
        { mac: '33:33:00:00:00:01', flags: ['self'], state: 'permanent' },
      ],
      routes: [
        { dst: '10.88.2.0/24', gateway: '10.88.9.9', flags: ['onlink'] },
        { dst: '10.88.77.0/24', gateway: '10.88.77.0', flags: ['onlink'] },
        { dst: '172.30.0.0/16', gateway: '10.88.2.0', flags: ['onlink'] },
      ],
    };
    const plan = planPeers(desiredPeers([A], self, net).peers, actual, 'flannel.1', net);
    expect(plan.ipFirst).toEqual([['route', 'del', '10.88.77.0/24', 'dev', 'flannel.1']]);
    expect(plan.bridge).toEqual([
      ['fdb', 'del', '0a:00:00:00:00:02', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self'],
      ['fdb', 'del', '0a:00:00:00:00:02', 'dst', '192.168.88.50', 'dev', 'flannel.1', 'self'],
      ['fdb', 'replace', '0a:00:00:00:00:02', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self', 'permanent'],
      ['fdb', 'del', '0a:00:00:00:00:77', 'dst', '192.168.88.77', 'dev', 'flannel.1', 'self'],
    ]);
    expect(plan.ipLast).toEqual([
      ['route', 'replace', '10.88.2.0/24', 'via', '10.88.2.0', 'dev', 'flannel.1', 'onlink'],
      ['neigh', 'del', '10.88.77.0', 'dev', 'flannel.1'],
    ]);
  });
  it('routes of an earlier Network (a subnet via its own address, onlink) go; other routes outside the network stay', () => {
    const actual: Actual = {
      ...programmed(),
      routes: [
        ...programmed().routes,
        { dst: '10.77.5.0/24', gateway: '10.77.5.0', flags: ['onlink'] }, // the overlay was 10.77.0.0/16 before
        { dst: '172.30.0.0/16', gateway: '10.88.2.0', flags: ['onlink'] }, // an operator's
        { dst: '192.0.2.0/24', gateway: '192.0.2.0' }, // not onlink: not ours either
      ],
    };
    const plan = planPeers(desiredPeers([A], self, net).peers, actual, 'flannel.1', net);
    expect(plan.ipFirst).toEqual([['route', 'del', '10.77.5.0/24', 'dev', 'flannel.1']]);
    expect(plan.changes).toEqual(['route 10.77.5.0/24: removed (no lease)']);
  });
  it('two peers, one programmed: only the other is added', () => {
    const plan = planPeers(desiredPeers([A, B], self, net).peers, programmed(), 'flannel.1', net);
    expect(plan.changes).toHaveLength(3);
    expect(plan.changes.every((c) => c.includes('10.88.3.0') || c.includes('0a:00:00:00:00:03'))).toBe(true);
  });
});

describe('DirectRouting', () => {
  const underlay = [P('192.168.88.0/24')];
  const far = lease('10.88.4.0/24', '172.16.9.4', '0a:00:00:00:00:04');

  it('a peer on a directly connected underlay subnet gets a plain route via its public address, no neighbour or FDB entry', () => {
    const peers = desiredPeers([A, far], self, net).peers;
    const plan = planPeers(peers, { ...empty, direct: [] }, 'flannel.1', net, underlay);
    expect(plan.ipLast).toContainEqual(['route', 'replace', '10.88.2.0/24', 'via', '192.168.88.2']);
    expect(plan.ipFirst.concat(plan.bridge, plan.ipLast).filter((l) => l.includes('10.88.2.0') || l.includes(A.attrs.vtepMAC!))).toEqual([]);
    // the other peer is not on a connected subnet: VXLAN as before
    expect(plan.ipLast).toContainEqual(['route', 'replace', '10.88.4.0/24', 'via', '10.88.4.0', 'dev', 'flannel.1', 'onlink']);
    expect(plan.bridge).toContainEqual(['fdb', 'replace', '0a:00:00:00:00:04', 'dst', '172.16.9.4', 'dev', 'flannel.1', 'self', 'permanent']);
  });

  it('in place: nothing to do', () => {
    const actual: Actual = { ...empty, direct: [{ dst: '10.88.2.0/24', gateway: '192.168.88.2', dev: 'eth0' }] };
    expect(planPeers(desiredPeers([A], self, net).peers, actual, 'flannel.1', net, underlay).changes).toEqual([]);
  });

  it('VXLAN -> direct: the VTEP route, neighbour and FDB entry go, the direct route comes', () => {
    const plan = planPeers(desiredPeers([A], self, net).peers, { ...programmed(), direct: [] }, 'flannel.1', net, underlay);
    expect(plan.ipFirst).toContainEqual(['route', 'del', '10.88.2.0/24', 'dev', 'flannel.1']);
    expect(plan.bridge).toContainEqual(['fdb', 'del', A.attrs.vtepMAC, 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self']);
    expect(plan.ipLast).toContainEqual(['neigh', 'del', '10.88.2.0', 'dev', 'flannel.1']);
    expect(plan.ipLast).toContainEqual(['route', 'replace', '10.88.2.0/24', 'via', '192.168.88.2']);
  });

  it('direct -> VXLAN (DirectRouting off, or the peer moved off the subnet): the direct route goes first, VXLAN comes', () => {
    const actual: Actual = { ...empty, direct: [{ dst: '10.88.2.0/24', gateway: '192.168.88.2', dev: 'eth0' }] };
    const plan = planPeers(desiredPeers([A], self, net).peers, actual, 'flannel.1', net);
    expect(plan.ipFirst[0]).toEqual(['route', 'del', '10.88.2.0/24', 'via', '192.168.88.2', 'dev', 'eth0']);
    expect(plan.ipLast).toContainEqual(['route', 'replace', '10.88.2.0/24', 'via', '10.88.2.0', 'dev', 'flannel.1', 'onlink']);
    expect(plan.bridge).toContainEqual(['fdb', 'replace', A.attrs.vtepMAC, 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self', 'permanent']);
  });

  it('a direct route of a peer that left goes; a peer whose public address changed gets its new one', () => {
    const moved = lease('10.88.2.0/24', '192.168.88.7', A.attrs.vtepMAC!);
    const actual: Actual = {
      ...empty,
      direct: [
        { dst: '10.88.2.0/24', gateway: '192.168.88.2', dev: 'eth0' },
        { dst: '10.88.9.0/24', gateway: '192.168.88.9', dev: 'eth0' },
      ],
    };
    const plan = planPeers(desiredPeers([moved], self, net).peers, actual, 'flannel.1', net, underlay);
    expect(plan.ipFirst).toEqual([
      ['route', 'del', '10.88.2.0/24', 'via', '192.168.88.2', 'dev', 'eth0'],
      ['route', 'del', '10.88.9.0/24', 'via', '192.168.88.9', 'dev', 'eth0'],
    ]);
    expect(plan.ipLast).toEqual([['route', 'replace', '10.88.2.0/24', 'via', '192.168.88.7']]);
  });

  it('a route for the whole network (or wider) via a gateway is not ours: never removed', () => {
    const actual: Actual = { ...empty, direct: [{ dst: '10.88.0.0/16', gateway: '192.168.88.254', dev: 'eth0' }] };
    expect(planPeers([], actual, 'flannel.1', net, underlay).changes).toEqual([]);
  });

  it('an IPv6 underlay prefix does not make an IPv4 peer direct', () => {
    expect(planPeers(desiredPeers([A], self, net).peers, empty, 'flannel.1', net, [P('fd00::/64')]).ipLast).toContainEqual(['route', 'replace', '10.88.2.0/24', 'via', '10.88.2.0', 'dev', 'flannel.1', 'onlink']);
  });
});

describe('applying a plan', () => {
  let kernel: FakeKernel;
  afterEach(() => kernel.uninstall());
  it('a line the kernel refuses does not keep the other batches from running; the refusal is reported after them', async () => {
    kernel = new FakeKernel().install();
    kernel.links().set('flannel.1', FakeKernel.link({ name: 'flannel.1', mtu: 1450, mac: '0a:00:00:00:00:01', vxlan: { id: 1, local: '192.168.88.1', link: 'eth0', port: 8472, learning: false } }));
    // the neighbour of 10.88.2.0 is refused (as the kernel would refuse a bad lladdr)
    kernel.failures.push({ match: 'neigh replace 10.88.2.0 ', msg: 'RTNETLINK answers: Invalid argument' });
    const plan = planPeers(desiredPeers([A, B], self, net).peers, empty, 'flannel.1', net);
    const err = await applyPlan(plan).then(() => undefined, (e: unknown) => e);
    // all three batches ran: B is programmed whole, A all but its neighbour
    expect(kernel.calls.map((c) => c.argv[0])).toEqual(['ip', 'bridge', 'ip']);
    expect(kernel.neigh().map((n) => n.dst)).toEqual(['10.88.3.0']);
    expect(kernel.fdb().map((f) => f.dst).sort()).toEqual(['192.168.88.2', '192.168.88.3']);
    expect(kernel.routesIn().map((r) => r.dst).sort()).toEqual(['10.88.2.0/24', '10.88.3.0/24']);
    expect(err).toBeInstanceOf(PlanError);
    expect((err as PlanError).message).toBe('ip neigh replace 10.88.2.0 lladdr 0a:00:00:00:00:02 dev flannel.1 nud permanent: RTNETLINK answers: Invalid argument');
    expect([...(err as PlanError).failedChanges].map((i) => plan.changes[i])).toEqual(['neigh 10.88.2.0 → 0a:00:00:00:00:02: added']);
  });
});

describe('IPv6 peers on flannel-v6.<VNI>', () => {
  const net6 = P('fd88:0:1::/48');
  const self6 = { subnet: P('fd88:0:1:1::/64'), publicIP: IP.parse('fd88:88::1')!, vni: 1 };
  const dual = (n: number, extra: Partial<LeaseAttrs> = {}): Lease => ({
    subnet: P(`10.88.${n}.0/24`),
    ipv6Subnet: P(`fd88:0:1:${n}::/64`),
    attrs: {
      publicIP: IP.parse(`192.168.88.${n}`)!,
      publicIPv6: IP.parse(`fd88:88::${n}`)!,
      backendType: 'vxlan',
      vni: 1,
      vtepMAC: `0a:00:00:00:04:0${n}`,
      v6Vni: 1,
      v6VtepMAC: `0a:00:00:00:06:0${n}`,
      ...extra,
    },
  });
  const programmed6 = (mac = '0a:00:00:00:06:02', ip = 'fd88:88::2'): Actual => ({
    neigh: [{ dst: 'fd88:0:1:2::', lladdr: mac, state: ['PERMANENT'] }],
    fdb: [{ mac, dst: ip, flags: ['self'], state: 'permanent' }],
    // the kernel's route to our own VTEP address (/128, proto kernel) and the link-local one are not peers
    routes: [
      { dst: 'fd88:0:1:1::', protocol: 'kernel', flags: [] },
      { dst: 'fd88:0:1:2::/64', gateway: 'fd88:0:1:2::', flags: ['onlink'] },
      { dst: 'fe80::/64', protocol: 'kernel', flags: [] },
    ],
  });

  it('uses the IPv6 subnet, BackendV6Data and PublicIPv6; skips leases without them, saying why', () => {
    const { peers, skipped } = desiredPeers(
      [
        { ...dual(1), attrs: { ...dual(1).attrs } }, // ours (same IPv6 subnet)
        dual(2),
        { subnet: P('10.88.3.0/24'), attrs: dual(3).attrs }, // an IPv4-only node
        dual(4, { v6VtepMAC: undefined }),
        dual(5, { publicIPv6: undefined }),
        dual(6, { v6Vni: 7 }),
        dual(7, { publicIPv6: IP.parse('fd88:88::1')! }),
      ],
      self6,
      net6,
    );
    expect(peers).toEqual([{ subnet: P('fd88:0:1:2::/64'), key: 'fd88:0:1:2::/64', vtepIP: 'fd88:0:1:2::', mac: '0a:00:00:00:06:02', publicIP: 'fd88:88::2' }]);
    expect(skipped).toEqual([
      'lease 10.88.3.0/24: no IPv6 subnet (its node is not reachable over IPv6)',
      'lease 10.88.4.0/24 + fd88:0:1:4::/64: no BackendV6Data.VtepMAC',
      'lease 10.88.5.0/24 + fd88:0:1:5::/64: no PublicIPv6',
      'lease 10.88.6.0/24 + fd88:0:1:6::/64: BackendV6Data.VNI 7 is not ours (1)',
      'lease 10.88.7.0/24 + fd88:0:1:7::/64: PublicIPv6 fd88:88::1 is this node\'s (a stale lease of ours?)',
    ]);
  });
  it('the IPv4 side of the same dual-stack leases uses BackendData and PublicIP', () => {
    const { peers } = desiredPeers([dual(1), dual(2)], { subnet: P('10.88.1.0/24'), publicIP: IP.parse('192.168.88.1')!, vni: 1 }, net);
    expect(peers).toEqual([{ subnet: P('10.88.2.0/24'), key: '10.88.2.0/24', vtepIP: '10.88.2.0', mac: '0a:00:00:00:04:02', publicIP: '192.168.88.2' }]);
  });
  it('both families\' plans are applied together: one ip, one bridge and one ip process for both VTEPs; a refused line is its plan\'s alone', async () => {
    const kernel = new FakeKernel().install();
    try {
      const vtep = (name: string, local: string) => FakeKernel.link({ name, mtu: 1450, mac: '0a:00:00:00:00:01', vxlan: { id: 1, local, link: 'eth0', port: 8472, learning: false } });
      kernel.links().set('flannel.1', vtep('flannel.1', '192.168.88.1'));
      kernel.links().set('flannel-v6.1', vtep('flannel-v6.1', 'fd88:88::1'));
      kernel.failures.push({ match: 'neigh replace fd88:0:1:3:: ', msg: 'RTNETLINK answers: Invalid argument' });
      const self4 = { subnet: P('10.88.1.0/24'), publicIP: IP.parse('192.168.88.1')!, vni: 1 };
      const v4 = planPeers(desiredPeers([dual(2), dual(3)], self4, net).peers, empty, 'flannel.1', net);
      const v6 = planPeers(desiredPeers([dual(2), dual(3)], self6, net6).peers, empty, 'flannel-v6.1', net6);
      const [refused4, refused6] = await applyPlans([v4, v6]);
      expect(kernel.calls.map((c) => c.argv[0])).toEqual(['ip', 'bridge', 'ip']);
      expect(kernel.routesIn().map((r) => r.dst).sort()).toEqual(['10.88.2.0/24', '10.88.3.0/24', 'fd88:0:1:2::/64', 'fd88:0:1:3::/64']);
      expect(kernel.neigh().map((n) => n.dst).sort()).toEqual(['10.88.2.0', '10.88.3.0', 'fd88:0:1:2::']);
      expect(refused4).toBeUndefined();
      expect(refused6).toBeInstanceOf(PlanError);
      expect([...refused6!.failedChanges].map((i) => v6.changes[i])).toEqual(['neigh fd88:0:1:3:: → 0a:00:00:00:06:03: added']);
    } finally {
      kernel.uninstall();
    }
  });
  it('a new peer: neighbour, FDB (dst = PublicIPv6), route via its subnet address onlink', () => {
    const plan = planPeers(desiredPeers([dual(2)], self6, net6).peers, { neigh: [], fdb: [], routes: [] }, 'flannel-v6.1', net6);
    expect(plan.ipFirst).toEqual([['neigh', 'replace', 'fd88:0:1:2::', 'lladdr', '0a:00:00:00:06:02', 'dev', 'flannel-v6.1', 'nud', 'permanent']]);
    expect(plan.bridge).toEqual([['fdb', 'replace', '0a:00:00:00:06:02', 'dst', 'fd88:88::2', 'dev', 'flannel-v6.1', 'self', 'permanent']]);
    expect(plan.ipLast).toEqual([['route', 'replace', 'fd88:0:1:2::/64', 'via', 'fd88:0:1:2::', 'dev', 'flannel-v6.1', 'onlink']]);
  });
  it('nothing to do when the kernel matches, whatever spelling it prints addresses in; kernel routes are left alone', () => {
    const actual = programmed6();
    actual.neigh[0].dst = 'FD88:0000:1:2:0:0:0:0';
    actual.fdb[0].dst = 'fd88:88:0:0:0:0:0:2';
    expect(planPeers(desiredPeers([dual(2)], self6, net6).peers, actual, 'flannel-v6.1', net6).changes).toEqual([]);
  });
  it('a removed peer: its route, FDB entry and neighbour go', () => {
    const plan = planPeers([], programmed6(), 'flannel-v6.1', net6);
    expect(plan.ipFirst).toEqual([['route', 'del', 'fd88:0:1:2::/64', 'dev', 'flannel-v6.1']]);
    expect(plan.bridge).toEqual([['fdb', 'del', '0a:00:00:00:06:02', 'dst', 'fd88:88::2', 'dev', 'flannel-v6.1', 'self']]);
    expect(plan.ipLast).toEqual([['neigh', 'del', 'fd88:0:1:2::', 'dev', 'flannel-v6.1']]);
  });
  it('a peer\'s IPv6 VTEP MAC changed: neighbour replaced, new FDB entry, the stale one removed', () => {
    const plan = planPeers(desiredPeers([dual(2, { v6VtepMAC: '0a:00:00:00:06:99' })], self6, net6).peers, programmed6(), 'flannel-v6.1', net6);
    expect(plan.ipFirst).toEqual([['neigh', 'replace', 'fd88:0:1:2::', 'lladdr', '0a:00:00:00:06:99', 'dev', 'flannel-v6.1', 'nud', 'permanent']]);
    expect(plan.bridge).toEqual([
      ['fdb', 'replace', '0a:00:00:00:06:99', 'dst', 'fd88:88::2', 'dev', 'flannel-v6.1', 'self', 'permanent'],
      ['fdb', 'del', '0a:00:00:00:06:02', 'dst', 'fd88:88::2', 'dev', 'flannel-v6.1', 'self'],
    ]);
    expect(plan.ipLast).toEqual([]);
  });
});
