// The overlay's families as data: VTEP settings and MTUs from the network
// config and the underlay, the MACs a lease advertises, subnet.env's content.
import { describe, expect, it } from 'vitest';
import { IP, Prefix } from '../../../../../src/net/ip';
import { encodeAttrs } from '../../../../../src/flannel/lease';
import { parseNetworkConfig } from '../../../../../src/flannel/netconfig';
import { advertise, leasedSides, planSides, podMtu, publicAddresses, selfOf } from '../../../../../src/flannel/backend/vxlan/sides';
import { subnetEnvOf } from '../../../../../src/flannel/backend/backend';
import { formatSubnetEnv, parseSubnetEnv, subnetsOf } from '../../../../../src/flannel/subnet-env';
import type { ExternalInterface as Underlay } from '../../../../../src/flannel/backend/backend';

const P = (s: string) => Prefix.parse(s)!;
const ip = (s: string) => IP.parse(s)!;
const V4 = '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}';
const DUAL = '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan","VNI":4,"Port":4789}}';
const V6 = '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}';
const both: Underlay = { dev: 'eth0', localIP: ip('192.168.1.5'), publicIP: ip('203.0.113.5'), localIPv6: ip('2001:db8::5'), publicIPv6: ip('2001:db8::5'), mtu: 1500, subnets: [] };
const v4only: Underlay = { dev: 'eth0', localIP: ip('192.168.1.5'), publicIP: ip('192.168.1.5'), mtu: 9000, subnets: [] };

describe('planSides', () => {
  it('IPv4: flannel.<VNI> on the underlay, MTU underlay − 50, the public address peers use', () => {
    const [s, ...rest] = planSides(parseNetworkConfig(V4), both);
    expect(rest).toEqual([]);
    expect(s.family).toBe(4);
    expect(s.publicIP.toString()).toBe('203.0.113.5'); // --public-ip (NAT): advertised; the tunnel is sent from the local address
    expect(s.vtep).toEqual({ name: 'flannel.1', vni: 1, local: '192.168.1.5', dev: 'eth0', port: 8472, mtu: 1450 });
  });

  it('dual stack: flannel.<VNI> and flannel-v6.<VNI>, the IPv6 one at underlay − 70; VNI and port from the config', () => {
    const plans = planSides(parseNetworkConfig(DUAL), both);
    expect(plans.map((p) => [p.family, p.vtep.name, p.vtep.local, p.vtep.mtu, p.vtep.vni, p.vtep.port, p.pool.network.toString()])).toEqual([
      [4, 'flannel.4', '192.168.1.5', 1450, 4, 4789, '10.244.0.0/16'],
      [6, 'flannel-v6.4', '2001:db8::5', 1430, 4, 4789, 'fd00:10:244::/56'],
    ]);
  });

  it('Backend.MTU is the underlay\'s MTU, as flannel reads it: each VTEP gets it less its encapsulation', () => {
    const cfg = parseNetworkConfig(DUAL.replace('"Port":4789', '"Port":4789,"MTU":1400'));
    expect(planSides(cfg, both).map((p) => p.vtep.mtu)).toEqual([1350, 1330]);
    // never above what the underlay carries: the kernel clamps a VXLAN device to it (flanneld's too)
    const big = parseNetworkConfig(V4.replace('"vxlan"', '"vxlan","MTU":9000'));
    expect(planSides(big, both).map((p) => p.vtep.mtu)).toEqual([1450]);
    // the smallest Backend.MTU a dual-stack config takes gives the IPv6 VTEP its minimum
    expect(planSides(parseNetworkConfig(DUAL.replace('"Port":4789', '"Port":4789,"MTU":1350')), both).map((p) => p.vtep.mtu)).toEqual([1300, 1280]);
  });

  it('GBP and Learning go on every VTEP; absent, neither is asked for', () => {
    const cfg = parseNetworkConfig(DUAL.replace('"Port":4789', '"Port":4789,"GBP":true,"Learning":true'));
    expect(planSides(cfg, both).map((p) => [p.vtep.gbp, p.vtep.learning])).toEqual([[true, true], [true, true]]);
    expect(planSides(parseNetworkConfig(DUAL), both).map((p) => ['gbp' in p.vtep, 'learning' in p.vtep])).toEqual([[false, false], [false, false]]);
  });

  it('refuses an underlay without a family the config enables, and a VTEP MTU below the family\'s minimum', () => {
    expect(() => planSides(parseNetworkConfig(V6), v4only)).toThrow('the network config enables IPv6 but underlay interface eth0 has no global IPv6 address');
    expect(() => planSides(parseNetworkConfig(V4), { dev: 'wg0', localIPv6: ip('2001:db8::5'), publicIPv6: ip('2001:db8::5'), mtu: 1500, subnets: [] })).toThrow(
      'the network config enables IPv4 but underlay interface wg0 has no IPv4 address',
    );
    expect(() => planSides(parseNetworkConfig(DUAL), { ...both, mtu: 1340 })).toThrow('IPv6 VTEP MTU 1270 is too small (underlay eth0 MTU 1340; IPv6 needs 1280)');
    expect(() => planSides(parseNetworkConfig(V4), { ...v4only, mtu: 100 })).toThrow('IPv4 VTEP MTU 50 is too small');
  });
});

describe('advertise: the lease attributes and each VTEP\'s MAC', () => {
  const plans = planSides(parseNetworkConfig(DUAL), both);
  let n = 0;
  const newMac = () => `0a:00:00:00:00:${String(++n).padStart(2, '0')}`;

  it('a reusable device keeps its MAC, else the MAC advertised before, else a new one; per family', () => {
    n = 0;
    const before = { publicIP: ip('203.0.113.5'), backendType: 'vxlan', vtepMAC: '0a:bb:00:00:00:04', v6VtepMAC: '0a:bb:00:00:00:06' };
    expect(advertise(plans, ['0a:dd:00:00:00:04', undefined], before, newMac)).toMatchObject({ vtepMAC: '0a:dd:00:00:00:04', v6VtepMAC: '0a:bb:00:00:00:06' });
    expect(advertise(plans, [undefined, undefined], { ...before, v6VtepMAC: undefined }, newMac)).toMatchObject({ vtepMAC: '0a:bb:00:00:00:04', v6VtepMAC: '0a:00:00:00:00:01' });
    expect(advertise(plans, [undefined, undefined], undefined, newMac)).toMatchObject({ vtepMAC: '0a:00:00:00:00:02', v6VtepMAC: '0a:00:00:00:00:03' });
  });

  it('encodes to flannel\'s dual-stack lease value, public addresses from the sides', () => {
    const attrs = advertise(plans, ['0a:00:00:00:00:04', '0a:00:00:00:00:06'], undefined);
    expect(encodeAttrs(attrs)).toBe(
      '{"PublicIP":"203.0.113.5","PublicIPv6":"2001:db8::5","BackendType":"vxlan","BackendData":{"VNI":4,"VtepMAC":"0a:00:00:00:00:04"},"BackendV6Data":{"VNI":4,"VtepMAC":"0a:00:00:00:00:06"}}',
    );
    const v6 = planSides(parseNetworkConfig(V6), both);
    expect(publicAddresses(v6)).toEqual({ publicIPv6: ip('2001:db8::5') });
    expect(encodeAttrs(advertise(v6, ['0a:00:00:00:00:06'], undefined))).toBe(
      '{"PublicIP":"0.0.0.0","PublicIPv6":"2001:db8::5","BackendType":"vxlan","BackendV6Data":{"VNI":1,"VtepMAC":"0a:00:00:00:00:06"}}',
    );
  });
});

describe('leased sides and subnet.env', () => {
  const plans = planSides(parseNetworkConfig(DUAL), both);
  const attrs = advertise(plans, ['0a:00:00:00:00:04', '0a:00:00:00:00:06'], undefined);
  const lease = { subnet: P('10.244.5.0/24'), ipv6Subnet: P('fd00:10:244:5::/64') };

  it('each side gets its subnet and the MAC the lease advertises; selfOf is what peer planning compares with', () => {
    const sides = leasedSides(plans, lease, attrs);
    expect(sides.map((s) => [s.subnet.toString(), s.spec.name, s.spec.mac])).toEqual([
      ['10.244.5.0/24', 'flannel.4', '0a:00:00:00:00:04'],
      ['fd00:10:244:5::/64', 'flannel-v6.4', '0a:00:00:00:00:06'],
    ]);
    expect(selfOf(sides[1])).toEqual({ subnet: lease.ipv6Subnet, publicIP: ip('2001:db8::5'), vni: 4, mac: '0a:00:00:00:00:06' });
    expect(() => leasedSides(plans, { subnet: lease.subnet }, attrs)).toThrow('the lease has no IPv6 subnet');
  });

  it('dual stack: both networks, first host addresses, the smaller VTEP MTU, flanneld\'s key order', () => {
    const env = subnetEnvOf(leasedSides(plans, lease, attrs), podMtu(plans), true);
    expect(formatSubnetEnv(env)).toBe(
      'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.5.1/24\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:5::1/64\nFLANNEL_MTU=1430\nFLANNEL_IPMASQ=true\n',
    );
    expect(subnetsOf(parseSubnetEnv(formatSubnetEnv(env)))).toEqual(lease); // what the next start tries first
  });

  it('IPv4 only: no IPv6 keys, the IPv4 VTEP\'s MTU', () => {
    const v4 = planSides(parseNetworkConfig(V4), v4only);
    const sides = leasedSides(v4, { subnet: P('10.244.7.0/24') }, advertise(v4, [undefined], undefined));
    expect(formatSubnetEnv(subnetEnvOf(sides, podMtu(v4), false))).toBe('FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_MTU=8950\nFLANNEL_IPMASQ=false\n');
  });
});
