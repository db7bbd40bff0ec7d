// host-gw's peers as data: which leases ask for a route, and the ip lines that
// make the kernel's routes into the overlay match them.
import { describe, expect, it } from 'vitest';
import { IP, Prefix } from '../../../../../src/net/ip';
import type { Lease } from '../../../../../src/flannel/lease';
import type { IpRoute } from '../../../../../src/iproute/route';
import { desiredRoutes, planRoutes } from '../../../../../src/flannel/backend/host-gw/routes';
import { HostGwNetwork, NAT_REASON } from '../../../../../src/flannel/backend/host-gw/network';
import { parseNetworkConfig } from '../../../../../src/flannel/netconfig';
import { Reporter } from '../../../../../src/flannel/log';

const P = (s: string) => Prefix.parse(s)!;
const ip = (s: string) => IP.parse(s)!;
const NET = P('10.244.0.0/16');
const NET6 = P('fd00:10:244::/56');
const self = { subnet: P('10.244.1.0/24'), publicIP: ip('192.168.1.1') };
const lease = (subnet: string, publicIP: string, backendType = 'host-gw', extra: Partial<Lease> = {}): Lease => ({
  subnet: P(subnet),
  attrs: { backendType, publicIP: ip(publicIP) },
  ...extra,
});

describe('desiredRoutes', () => {
  it('one route per host-gw peer via its public address; ours, other backends and unusable leases skipped with why', () => {
    const { peers, skipped } = desiredRoutes(
      [
        lease('10.244.1.0/24', '192.168.1.1'), // ours
        lease('10.244.2.0/24', '192.168.1.2', 'host-gw', { node: 'n2' }),
        lease('10.244.3.0/24', '192.168.1.3', 'vxlan'),
        lease('10.244.4.0/24', '192.168.1.1'), // our address: a stale lease of ours
        lease('10.99.5.0/24', '192.168.1.5'),
        lease('10.244.1.128/25', '192.168.1.6'),
        { ipv6Subnet: P('fd00:10:244:7::/64'), attrs: { backendType: 'host-gw', publicIPv6: ip('fd88::7') } },
      ],
      self,
      NET,
    );
    expect(peers).toEqual([{ subnet: P('10.244.2.0/24'), gateway: '192.168.1.2', node: 'n2' }]);
    expect(skipped).toEqual([
      'lease 10.244.3.0/24: backend "vxlan" is not host-gw',
      'lease 10.244.4.0/24: PublicIP 192.168.1.1 is this node\'s (a stale lease of ours?)',
      'lease 10.99.5.0/24: outside the network 10.244.0.0/16',
      'lease 10.244.1.128/25: overlaps this node\'s subnet 10.244.1.0/24',
      'lease fd00:10:244:7::/64: no IPv4 subnet (its node is not reachable over IPv4)',
    ]);
  });

  it('IPv6: via PublicIPv6', () => {
    const l: Lease = { subnet: P('10.244.2.0/24'), ipv6Subnet: P('fd00:10:244:2::/64'), attrs: { backendType: 'host-gw', publicIP: ip('192.168.1.2'), publicIPv6: ip('fd88::2') } };
    expect(desiredRoutes([l], { subnet: P('fd00:10:244:1::/64') }, NET6).peers).toEqual([{ subnet: P('fd00:10:244:2::/64'), gateway: 'fd88::2' }]);
    expect(desiredRoutes([{ ...l, attrs: { ...l.attrs, publicIPv6: undefined } }], { subnet: P('fd00:10:244:1::/64') }, NET6).skipped).toEqual(['lease 10.244.2.0/24 + fd00:10:244:2::/64: no PublicIPv6']);
  });
});

describe('planRoutes', () => {
  const peers = [
    { subnet: P('10.244.2.0/24'), gateway: '192.168.1.2' },
    { subnet: P('10.244.3.0/24'), gateway: '192.168.1.3' },
  ];
  it('adds what is missing, keeps what is right, replaces what differs, removes routes no lease asks for; leaves gateway-less and whole-network routes alone', () => {
    const actual: IpRoute[] = [
      { dst: '10.244.2.0/24', gateway: '192.168.1.2', dev: 'eth0' }, // right
      { dst: '10.244.3.0/24', gateway: '192.168.1.9', dev: 'eth0' }, // another gateway
      { dst: '10.244.9.0/24', gateway: '10.244.9.0', dev: 'flannel.1', flags: ['onlink'] }, // a vxlan route, no lease
      { dst: '10.244.1.0/24', dev: 'cni0', protocol: 'kernel', scope: 'link' }, // the bridge's
      { dst: '10.244.0.0/16', gateway: '192.168.1.254', dev: 'eth0' }, // someone's route for the whole network
    ];
    const plan = planRoutes(peers, actual, 'eth0', NET);
    expect(plan.lines).toEqual([
      ['route', 'del', '10.244.3.0/24', 'via', '192.168.1.9', 'dev', 'eth0'],
      ['route', 'del', '10.244.9.0/24', 'via', '10.244.9.0', 'dev', 'flannel.1'],
      ['route', 'replace', '10.244.3.0/24', 'via', '192.168.1.3', 'dev', 'eth0'],
    ]);
    expect(plan.changes).toEqual([
      'route 10.244.3.0/24 via 192.168.1.9 dev eth0: removed (now via 192.168.1.3 dev eth0)',
      'route 10.244.9.0/24 via 10.244.9.0 dev flannel.1: removed (no lease)',
      'route 10.244.3.0/24 via 192.168.1.3 dev eth0: added',
    ]);
    expect(plan.owners).toEqual([0, 1, 2]);
    // what a refused line is counted as: a peer not routed, or a stale route left
    expect(plan.subjects).toEqual(['10.244.3.0/24', undefined, '10.244.3.0/24']);
  });
  it('nothing to do when the kernel has exactly the peers\' routes (any spelling of the gateway)', () => {
    const v6 = [{ subnet: P('fd00:10:244:2::/64'), gateway: 'fd88::2' }];
    expect(planRoutes(v6, [{ dst: 'fd00:10:244:2::/64', gateway: 'FD88:0::2', dev: 'eth0', metric: 1024 }], 'eth0', NET6).lines).toEqual([]);
    expect(planRoutes(peers, [{ dst: '10.244.2.0/24', gateway: '192.168.1.2', dev: 'eth0' }, { dst: '10.244.3.0/24', gateway: '192.168.1.3', dev: 'eth0' }], 'eth0', NET).lines).toEqual([]);
  });
  it('the same route through another device is replaced (the underlay changed)', () => {
    const plan = planRoutes(peers.slice(0, 1), [{ dst: '10.244.2.0/24', gateway: '192.168.1.2', dev: 'eth1', metric: 5 }], 'eth0', NET);
    expect(plan.lines).toEqual([
      ['route', 'del', '10.244.2.0/24', 'via', '192.168.1.2', 'dev', 'eth1', 'metric', '5'],
      ['route', 'replace', '10.244.2.0/24', 'via', '192.168.1.2', 'dev', 'eth0'],
    ]);
  });
});

describe('HostGwNetwork', () => {
  const ctx = { log: () => {}, problems: new Reporter(() => {}), resync: () => {} };
  const DUAL = parseNetworkConfig('{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"host-gw"}}');
  const ext = { dev: 'eth0', localIP: ip('192.168.1.1'), publicIP: ip('192.168.1.1'), localIPv6: ip('fd88::1'), publicIPv6: ip('fd88::1'), mtu: 9000, subnets: [] };
  it('advertises flanneld\'s host-gw lease (no backend data), the interface\'s full MTU', async () => {
    const n = new HostGwNetwork(DUAL, ext, ctx);
    expect(await n.leaseAttrs()).toEqual({ backendType: 'host-gw', publicIP: ip('192.168.1.1'), publicIPv6: ip('fd88::1') });
    expect(n.mtu).toBe(9000);
    expect(n.attach({ subnet: P('10.244.5.0/24'), ipv6Subnet: P('fd00:10:244:5::/64') }).map((f) => [f.family, f.subnet.toString()])).toEqual([
      [4, '10.244.5.0/24'],
      [6, 'fd00:10:244:5::/64'],
    ]);
  });
  it('refuses a public address that is not the interface\'s (NAT) with flanneld\'s reason, each family', () => {
    expect(NAT_REASON).toBe("your PublicIP differs from interface IP, meaning that probably you're on a NAT, which is not supported by host-gw backend");
    expect(() => new HostGwNetwork(DUAL, { ...ext, publicIP: ip('203.0.113.1') }, ctx)).toThrow(`${NAT_REASON} (--public-ip 203.0.113.1, eth0 has 192.168.1.1)`);
    expect(() => new HostGwNetwork(DUAL, { ...ext, publicIPv6: ip('2001:db8::1') }, ctx)).toThrow(`${NAT_REASON} (--public-ipv6 2001:db8::1, eth0 has fd88::1)`);
  });
});
