import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Prefix } from '../../../src/net/ip';
import { formatSubnetEnv, parseSubnetEnv, requireComplete } from '../../../src/flannel/subnet-env';
import { ConfigError, formatNetworkConfig, parseNetworkConfig, poolSize } from '../../../src/flannel/netconfig';
import { IP } from '../../../src/net/ip';
import { decodeAttrs, encodeAttrs, leaseKey, parseLeaseKey, sameSubnets, subnetKey } from '../../../src/flannel/lease';

describe('subnet.env', () => {
  const text = 'FLANNEL_NETWORK=10.88.0.0/16\nFLANNEL_SUBNET=10.88.5.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n';
  it('round-trips flanneld\'s format byte for byte', () => {
    const env = parseSubnetEnv(text);
    expect(env.subnet?.toString()).toBe('10.88.5.0/24');
    expect(env.subnet?.toAddressString()).toBe('10.88.5.1/24');
    expect(formatSubnetEnv(env)).toBe(text);
  });
  it('reads comma-separated networks, IPv6 keys, ignores unknown keys and comments', () => {
    const env = parseSubnetEnv('# x\nFOO=1\nFLANNEL_NETWORK=10.88.0.0/16,10.99.0.0/16\nFLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_IPV6_SUBNET=fd00:0:0:1::1/64\nFLANNEL_MTU=1400\nFLANNEL_IPMASQ=true\n');
    expect(env.networks.map(String)).toEqual(['10.88.0.0/16', '10.99.0.0/16']);
    expect(env.ipv6Subnet?.toString()).toBe('fd00:0:0:1::/64');
    expect(env.ipMasq).toBe(true);
    expect(() => requireComplete(env)).not.toThrow();
  });
  it.each([
    ['FLANNEL_SUBNET=10.88.5.1/33', /FLANNEL_SUBNET/],
    ['FLANNEL_MTU=abc', /FLANNEL_MTU/],
    ['FLANNEL_IPMASQ=yes', /FLANNEL_IPMASQ/],
    ['FLANNEL_NETWORK=fd00::/48', /FLANNEL_NETWORK/],
  ])('rejects %s naming the key', (line, msg) => expect(() => parseSubnetEnv(line)).toThrow(msg));
  it('names the first missing key', () => {
    expect(() => requireComplete(parseSubnetEnv('FLANNEL_NETWORK=10.88.0.0/16\n'))).toThrow(/FLANNEL_SUBNET/);
    expect(() => requireComplete(parseSubnetEnv('FLANNEL_SUBNET=10.88.5.1/24\n'))).toThrow(/FLANNEL_NETWORK/);
    expect(() => requireComplete(parseSubnetEnv('FLANNEL_NETWORK=10.88.0.0/16\nFLANNEL_SUBNET=10.88.5.1/24\nFLANNEL_IPMASQ=false'))).toThrow(/FLANNEL_MTU/);
  });
});

describe('network config (flannel\'s defaults and checks)', () => {
  it('fills flannel\'s defaults: /24 subnets, skip the first, VNI 1, port 8472', () => {
    const c = parseNetworkConfig('{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan"}}');
    const v4 = c.v4!;
    expect([v4.subnetLen, v4.subnetMin.toString(), v4.subnetMax.toString(), c.vni, c.port]).toEqual([24, '10.88.1.0', '10.88.255.0', 1, 8472]);
    expect(poolSize(v4)).toBe(255n);
    expect(c.mtu).toBeUndefined();
    expect(c.v6).toBeUndefined();
    expect([c.directRouting, c.gbp, c.learning, c.nftables]).toEqual([false, false, false, false]);
  });
  it('reads the vxlan backend\'s DirectRouting, GBP and Learning, and EnableNFTables', () => {
    const c = parseNetworkConfig('{"Network":"10.88.0.0/16","EnableNFTables":true,"Backend":{"Type":"vxlan","DirectRouting":true,"GBP":true,"Learning":true}}');
    expect([c.directRouting, c.gbp, c.learning, c.nftables]).toEqual([true, true, true, true]);
  });
  it('matches field names as Go\'s encoding/json does: the exact name, else any case (flannel\'s own tags are "mtu", "directRouting")', () => {
    const c = parseNetworkConfig('{"network":"10.88.0.0/16","enableNFTables":true,"backend":{"type":"vxlan","vni":3,"mtu":1400,"directRouting":true,"gbp":true}}');
    expect([c.v4?.network.toString(), c.vni, c.mtu, c.directRouting, c.gbp, c.learning, c.nftables]).toEqual(['10.88.0.0/16', 3, 1400, true, true, false, true]);
    // the exact spelling wins over another case
    expect(parseNetworkConfig('{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan","mtu":1300,"MTU":1400}}').mtu).toBe(1400);
  });
  it('splits small networks in four, keeps explicit values', () => {
    expect(parseNetworkConfig('{"Network":"10.88.0.0/26","Backend":{"Type":"vxlan"}}').v4!.subnetLen).toBe(28);
    const c = parseNetworkConfig('{"Network":"10.88.0.0/16","SubnetLen":26,"SubnetMin":"10.88.3.0","SubnetMax":"10.88.3.192","Backend":{"Type":"vxlan","VNI":42,"Port":4789,"MTU":1400}}');
    const v4 = c.v4!;
    expect([v4.subnetLen, v4.subnetMin.toString(), v4.subnetMax.toString(), c.vni, c.port, c.mtu]).toEqual([26, '10.88.3.0', '10.88.3.192', 42, 4789, 1400]);
    expect(poolSize(v4)).toBe(4n);
  });
  it.each([
    ['not json', /not JSON/],
    ['{}', /"Network" is missing/],
    ['{"Network":"10.88.0.1/16"}', /host bits/],
    ['{"Network":"fd00::/48"}', /IPv4 CIDR/],
    ['{"Network":"10.88.0.0/30"}', /too small/],
    ['{"Network":"10.88.0.0/16","SubnetLen":17}', /four \/17 subnets/],
    ['{"Network":"10.88.0.0/16","SubnetLen":31}', /at most 30/],
    ['{"Network":"10.88.0.0/16","SubnetMin":"10.89.0.0"}', /"SubnetMin" 10.89.0.0 is not inside/],
    ['{"Network":"10.88.0.0/16","SubnetMax":"10.88.3.7"}', /"SubnetMax" .* boundary/],
    ['{"Network":"10.88.0.0/16","SubnetMin":"10.88.9.0","SubnetMax":"10.88.3.0"}', /above SubnetMax/],
    ['{"Network":"10.88.0.0/16","Backend":{"Type":"udp"}}', /"Backend.Type" is "udp": .*\(Backend.Type must be vxlan or host-gw\)/],
    // flannel: no Backend is its "udp" backend, a Backend without Type an error; never guessed to be vxlan
    ['{"Network":"10.88.0.0/16"}', /field "Backend" is missing: flannel then runs its "udp" backend; .*\(Backend.Type must be vxlan or host-gw\)/],
    ['{"Network":"10.88.0.0/16","Backend":null}', /field "Backend" is missing/],
    ['{"Network":"10.88.0.0/16","Backend":{}}', /field "Backend.Type" is missing \(Backend.Type must be vxlan or host-gw\)/],
    ['{"Network":"10.88.0.0/16","Backend":{"VNI":7}}', /field "Backend.Type" is missing/],
    ['{"Network":"10.88.0.0/16","Backend":"vxlan"}', /field "Backend" must be an object/],
    ['{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan","VNI":"1"}}', /Backend.VNI/],
    ['{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan","Port":70000}}', /Backend.Port/],
    ['{"Network":"10.88.0.0/16","EnableIPv6":true}', /IPv6/],
    ['{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan","DirectRouting":"true"}}', /field "Backend.DirectRouting" must be true or false, got "true"/],
    ['{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan","GBP":1}}', /field "Backend.GBP" must be true or false/],
    ['{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan","Learning":"yes"}}', /field "Backend.Learning" must be true or false/],
    ['{"Network":"10.88.0.0/16","EnableNFTables":"false","Backend":{"Type":"vxlan"}}', /field "EnableNFTables" must be true or false/],
    // Backend.MTU is the underlay's: an IPv4 VTEP needs 68 + 50
    ['{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan","MTU":117}}', /"Backend.MTU" must be an integer from 118 to 65535, got 117/],
  ])('rejects %s', (text, msg) => {
    expect(() => parseNetworkConfig(text)).toThrow(ConfigError);
    expect(() => parseNetworkConfig(text)).toThrow(msg);
  });
  it('Backend.Type host-gw: flannel\'s name, no settings of its own (vxlan\'s are read and not used, as flanneld does)', () => {
    const c = parseNetworkConfig('{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::/56","Backend":{"Type":"host-gw"}}');
    expect([c.backend, c.v4?.network.toString(), c.v6?.network.toString()]).toEqual(['host-gw', '10.88.0.0/16', 'fd88::/56']);
    expect(parseNetworkConfig('{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan"}}').backend).toBe('vxlan');
    expect(() => parseNetworkConfig('{"Network":"10.88.0.0/16","Backend":{"Type":"hostgw"}}')).toThrow(/"Backend.Type" is "hostgw"/);
    expect(formatNetworkConfig({ network: '10.88.0.0/16', backend: 'host-gw' })).toBe('{"Network":"10.88.0.0/16","Backend":{"Type":"host-gw"}}');
    expect(() => formatNetworkConfig({ network: '10.88.0.0/16', backend: 'host-gw', vni: 4 })).toThrow('--vni is a vxlan setting: host-gw has none');
    expect(() => formatNetworkConfig({ network: '10.88.0.0/16', backend: 'host-gw', directRouting: true })).toThrow('--direct-routing is a vxlan setting');
  });
  it('network set writes flannel field names and refuses what the daemon would refuse', () => {
    expect(formatNetworkConfig({ network: '10.88.0.0/16', subnetLen: 24, vni: 7, port: 4789 })).toBe(
      '{"Network":"10.88.0.0/16","SubnetLen":24,"Backend":{"Type":"vxlan","VNI":7,"Port":4789}}',
    );
    expect(() => formatNetworkConfig({ network: '10.88.0.0/16', subnetLen: 16 })).toThrow(/four/);
    expect(formatNetworkConfig({ network: '10.88.0.0/16', mtu: 1400, directRouting: true, gbp: true, learning: true, nftables: true })).toBe(
      '{"Network":"10.88.0.0/16","EnableNFTables":true,"Backend":{"Type":"vxlan","MTU":1400,"DirectRouting":true,"GBP":true,"Learning":true}}',
    );
  });
  it('network set writes SubnetMin/SubnetMax (and the IPv6 pair), checked as the daemon checks them', () => {
    const text = formatNetworkConfig({ network: '10.88.0.0/16', subnetMin: '10.88.1.0', subnetMax: '10.88.99.0' });
    expect(text).toBe('{"Network":"10.88.0.0/16","SubnetMin":"10.88.1.0","SubnetMax":"10.88.99.0","Backend":{"Type":"vxlan"}}');
    expect(poolSize(parseNetworkConfig(text).v4!)).toBe(99n);
    const dual = formatNetworkConfig({ network: '10.88.0.0/16', ipv6Network: 'fd88::/48', ipv6SubnetMin: 'fd88:0:0:10::', ipv6SubnetMax: 'fd88:0:0:1f::' });
    expect(JSON.parse(dual)).toMatchObject({ IPv6SubnetMin: 'fd88:0:0:10::', IPv6SubnetMax: 'fd88:0:0:1f::' });
    expect(poolSize(parseNetworkConfig(dual).v6!)).toBe(16n);
    expect(() => formatNetworkConfig({ network: '10.88.0.0/16', subnetMin: '10.88.50.0', subnetMax: '10.88.9.0' })).toThrow(/SubnetMin 10.88.50.0 is above SubnetMax/);
    expect(() => formatNetworkConfig({ network: '10.88.0.0/16', subnetMax: '10.89.0.0' })).toThrow(/SubnetMax/);
    expect(() => formatNetworkConfig({ network: '10.88.0.0/16', ipv6SubnetMax: 'fd88::' })).toThrow('--ipv6-subnet-max needs --ipv6-network');
    expect(() => formatNetworkConfig({ ipv4: false, ipv6Network: 'fd88::/48', subnetMin: '10.88.1.0' })).toThrow('--subnet-min is for the IPv4 overlay');
  });
});

describe('lease schema', () => {
  const flannelJson = '{"PublicIP":"192.168.88.9","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:58:0a:58:09:00"}}';
  it('encodes in flanneld\'s field order, compact (flanneld itself adds "PublicIPv6":null; we leave it out)', () => {
    expect(encodeAttrs(decodeAttrs(flannelJson))).toBe(flannelJson);
  });
  it('reads flannel\'s optional fields (PublicIPv6 null or set, upper-case MAC)', () => {
    const a = decodeAttrs('{"PublicIP":"192.168.88.9","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0A:58:0A:58:09:00"}}');
    expect(a.vtepMAC).toBe('0a:58:0a:58:09:00');
    expect(a.publicIPv6).toBeUndefined();
    expect(decodeAttrs('{"PublicIP":"192.168.88.9","PublicIPv6":"fd00::9","BackendType":"vxlan"}').publicIPv6?.toString()).toBe('fd00::9');
  });
  it.each([
    ['{"PublicIP":"x","BackendType":"vxlan"}', /"PublicIP"/],
    ['{"PublicIP":"1.2.3.4","BackendType":"vxlan","BackendData":{"VtepMAC":"zz"}}', /VtepMAC/],
    ['[]', /object/],
    ['{', /not JSON/],
  ])('rejects %s', (text, msg) => expect(() => decodeAttrs(text)).toThrow(msg));
  it('subnet keys', () => {
    expect(subnetKey(Prefix.parse('10.88.5.0/24')!)).toBe('10.88.5.0-24');
    expect(leaseKey({ subnet: Prefix.parse('10.88.5.0/24')! })).toBe('10.88.5.0-24');
    expect(parseLeaseKey('10.88.5.0-24')?.subnet?.toString()).toBe('10.88.5.0/24');
    expect(parseLeaseKey('10.88.5.0-24')?.ipv6Subnet).toBeUndefined();
    expect(parseLeaseKey('10.88.5.1-24')).toBeUndefined();
    expect(parseLeaseKey('junk')).toBeUndefined();
  });
});

describe('IPv6 network config (EnableIPv6, IPv6Network, IPv6SubnetLen, IPv6SubnetMin/Max, EnableIPv4)', () => {
  it('dual stack: flannel\'s defaults, /64 per node, the first subnet skipped', () => {
    const c = parseNetworkConfig('{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88:0:1::/48","Backend":{"Type":"vxlan"}}');
    expect(c.v4?.network.toString()).toBe('10.88.0.0/16');
    const v6 = c.v6!;
    expect([v6.network.toString(), v6.subnetLen, v6.subnetMin.toString(), v6.subnetMax.toString()]).toEqual([
      'fd88:0:1::/48', 64, 'fd88:0:1:1::', 'fd88:0:1:ffff::',
    ]);
    expect(poolSize(v6)).toBe(65535n);
  });
  it('IPv6 only (EnableIPv4 false): no IPv4 pool, Network not needed', () => {
    const c = parseNetworkConfig('{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd88:0:2::/56","Backend":{"Type":"vxlan"}}');
    expect(c.v4).toBeUndefined();
    expect([c.v6!.subnetLen, c.v6!.subnetMin.toString(), poolSize(c.v6!)]).toEqual([64, 'fd88:0:2:1::', 255n]);
  });
  it('small IPv6 networks split in four; explicit IPv6SubnetLen, IPv6SubnetMin and IPv6SubnetMax are kept', () => {
    expect(parseNetworkConfig('{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::/120","Backend":{"Type":"vxlan"}}').v6!.subnetLen).toBe(122);
    const c = parseNetworkConfig(
      '{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::/48","IPv6SubnetLen":80,"IPv6SubnetMin":"fd88:0:0:7::","IPv6SubnetMax":"fd88:0:0:7:3::","Backend":{"Type":"vxlan"}}',
    );
    const v6 = c.v6!;
    expect([v6.subnetLen, v6.subnetMin.toString(), v6.subnetMax.toString(), poolSize(v6)]).toEqual([80, 'fd88:0:0:7::', 'fd88:0:0:7:3::', 4n]);
  });
  it('"Networks"/"IPv6Networks" (flannel\'s lists before v0.25) are not read, as flanneld v0.28.9 reads them not: beside "Network" the config works, alone it is named', () => {
    const cfg = parseNetworkConfig('{"Network":"10.88.0.0/16","Networks":["10.89.0.0/16"],"IPv6Networks":["fd89::/48"],"Backend":{"Type":"vxlan"}}');
    expect(cfg.v4?.network.toString()).toBe('10.88.0.0/16');
    expect(() => parseNetworkConfig('{"Networks":["10.89.0.0/16"],"Backend":{"Type":"vxlan"}}')).toThrow(
      'network config field "Network" is missing (an IPv4 CIDR such as 10.244.0.0/16); "Networks", flannel\'s list of networks before v0.25, is not read (nor by flanneld v0.28.9)',
    );
  });
  it('IPv6Network without EnableIPv6 is not used, as in flanneld', () => {
    expect(parseNetworkConfig('{"Network":"10.88.0.0/16","IPv6Network":"not even a CIDR","Backend":{"Type":"vxlan"}}').v6).toBeUndefined();
  });
  it.each([
    ['{"Network":"10.88.0.0/16","EnableIPv6":true}', /"IPv6Network" is missing/],
    ['{"Network":"10.88.0.0/16","EnableIPv6":"yes","IPv6Network":"fd88::/48"}', /"EnableIPv6" must be true or false/],
    ['{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"10.99.0.0/16"}', /"IPv6Network" must be an IPv6 CIDR/],
    ['{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::1/48"}', /"IPv6Network" fd88::1\/48 has host bits set \(did you mean fd88::\/48\?\)/],
    ['{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::/48","IPv6SubnetLen":127}', /"IPv6SubnetLen" must be at most 126/],
    ['{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::/48","IPv6SubnetLen":49}', /cannot hold four \/49 subnets \(IPv6SubnetLen must be at least 50\)/],
    ['{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::/126"}', /too small/],
    ['{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::/48","IPv6SubnetMin":"fd89::"}', /"IPv6SubnetMin" fd89:: is not inside IPv6Network fd88::\/48/],
    ['{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::/48","IPv6SubnetMax":"fd88:0:0:5::1"}', /"IPv6SubnetMax" fd88:0:0:5::1 is not on a \/64 boundary/],
    ['{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::/48","IPv6SubnetMin":"10.88.1.0"}', /"IPv6SubnetMin" must be an IPv6 address/],
    ['{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::/48","IPv6SubnetMin":"fd88:0:0:9::","IPv6SubnetMax":"fd88:0:0:3::"}', /IPv6SubnetMin fd88:0:0:9:: is above IPv6SubnetMax/],
    ['{"EnableIPv4":false,"Network":"10.88.0.0/16"}', /both false/],
    ['{"EnableIPv4":false,"EnableIPv6":true}', /"IPv6Network" is missing/],
    ['{"EnableIPv6":true,"IPv6Network":"fd88::/48"}', /"Network" is missing/],
    ['{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::/48","Backend":{"Type":"vxlan","MTU":1200}}', /"Backend.MTU" must be an integer from 1350/] // IPv6 VTEP: 1280 + 70,
  ])('rejects %s', (text, msg) => {
    expect(() => parseNetworkConfig(text)).toThrow(ConfigError);
    expect(() => parseNetworkConfig(text)).toThrow(msg);
  });
  it('network set writes flannel\'s field names for dual stack and IPv6 only', () => {
    expect(formatNetworkConfig({ network: '10.88.0.0/16', ipv6Network: 'fd88::/48', ipv6SubnetLen: 64 })).toBe(
      '{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::/48","IPv6SubnetLen":64,"Backend":{"Type":"vxlan"}}',
    );
    expect(formatNetworkConfig({ ipv4: false, ipv6Network: 'fd88::/48', vni: 2 })).toBe(
      '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd88::/48","Backend":{"Type":"vxlan","VNI":2}}',
    );
    expect(() => formatNetworkConfig({ ipv6Network: 'fd88::/48' })).toThrow(/--network is required/);
    expect(() => formatNetworkConfig({ network: '10.88.0.0/16', ipv6SubnetLen: 64 })).toThrow(/needs --ipv6-network/);
    expect(() => formatNetworkConfig({ network: '10.88.0.0/16', ipv6Network: 'fd88::1/48' })).toThrow(/host bits/);
  });
});

describe('IPv6 lease schema (flannel\'s LeaseAttrs: PublicIPv6, BackendV6Data; subnets in the key)', () => {
  const dual =
    '{"PublicIP":"192.168.88.9","PublicIPv6":"fd88:88::9","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:58:0a:58:09:00"},"BackendV6Data":{"VNI":1,"VtepMAC":"0a:58:0a:58:09:06"}}';
  const v6only = '{"PublicIP":"0.0.0.0","PublicIPv6":"fd88:88::9","BackendType":"vxlan","BackendV6Data":{"VNI":1,"VtepMAC":"0a:58:0a:58:09:06"}}';
  it('a dual-stack lease: what flanneld writes, read and re-encoded byte for byte', () => {
    const a = decodeAttrs(dual);
    expect([a.publicIP?.toString(), a.publicIPv6?.toString(), a.vni, a.vtepMAC, a.v6Vni, a.v6VtepMAC]).toEqual([
      '192.168.88.9', 'fd88:88::9', 1, '0a:58:0a:58:09:00', 1, '0a:58:0a:58:09:06',
    ]);
    expect(encodeAttrs(a)).toBe(dual);
  });
  it('the attributes the daemon builds encode to exactly that JSON', () => {
    const attrs = {
      backendType: 'vxlan',
      publicIP: IP.parse('192.168.88.9')!,
      publicIPv6: IP.parse('fd88:88:0::9')!,
      vni: 1,
      vtepMAC: '0a:58:0a:58:09:00',
      v6Vni: 1,
      v6VtepMAC: '0a:58:0a:58:09:06',
    };
    expect(encodeAttrs(attrs)).toBe(dual);
    const { publicIP: _p, vni: _v, vtepMAC: _m, ...v6 } = attrs;
    expect(encodeAttrs(v6)).toBe(v6only);
  });
  it('an IPv6-only lease: PublicIP "0.0.0.0" (flannel\'s zero ip.IP4), no BackendData', () => {
    const a = decodeAttrs(v6only);
    expect(a.publicIP).toBeUndefined();
    expect([a.publicIPv6?.toString(), a.v6VtepMAC, a.vtepMAC]).toEqual(['fd88:88::9', '0a:58:0a:58:09:06', undefined]);
    expect(encodeAttrs(a)).toBe(v6only);
  });
  it('an IPv4-only lease is unchanged: no PublicIPv6, no BackendV6Data', () => {
    const v4 = '{"PublicIP":"192.168.88.9","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:58:0a:58:09:00"}}';
    expect(encodeAttrs(decodeAttrs(v4))).toBe(v4);
  });
  it.each([
    ['{"PublicIP":"192.168.88.9","PublicIPv6":"192.168.88.10","BackendType":"vxlan"}', /"PublicIPv6" must be an IPv6 address/],
    ['{"PublicIP":"0.0.0.0","BackendType":"vxlan"}', /"PublicIP"/],
    ['{"PublicIPv6":"fd88::9","BackendType":"vxlan","BackendV6Data":{"VNI":1,"VtepMAC":"nope"}}', /"BackendV6Data.VtepMAC" must be a MAC/],
  ])('rejects %s', (text, msg) => expect(() => decodeAttrs(text)).toThrow(msg));
  it('sameSubnets is leaseKey\'s equality (both families, their presence, the prefix length)', () => {
    const keys = ['10.88.5.0-24', '10.88.5.0-25', '10.88.6.0-24', 'fd88:0:0:5::-64', 'fd88:0:0:5::-65', '10.88.5.0-24&fd88:0:0:5::-64', '10.88.5.0-24&fd88:0:0:6::-64'];
    for (const a of keys) for (const b of keys) expect(sameSubnets(parseLeaseKey(a)!, parseLeaseKey(b)!), `${a} ${b}`).toBe(a === b);
  });
  it('keys: flannel\'s MakeSubnetKey (IPv4 "&" IPv6 for dual stack, the IPv6 subnet alone for IPv6 only)', () => {
    const subnet = Prefix.parse('10.88.5.0/24')!;
    const ipv6Subnet = Prefix.parse('fd88:0:0:5::/64')!;
    expect(leaseKey({ subnet, ipv6Subnet })).toBe('10.88.5.0-24&fd88:0:0:5::-64');
    expect(leaseKey({ ipv6Subnet })).toBe('fd88:0:0:5::-64');
    expect(leaseKey({ ipv6Subnet: Prefix.parse('fd00:10:244:1::/64')! })).toBe('fd00:10:244:1::-64');
    const dualKey = parseLeaseKey('10.88.5.0-24&fd88:0:0:5::-64')!;
    expect([dualKey.subnet?.toString(), dualKey.ipv6Subnet?.toString()]).toEqual(['10.88.5.0/24', 'fd88:0:0:5::/64']);
    const v6Key = parseLeaseKey('fd88:0:0:5::-64')!;
    expect([v6Key.subnet, v6Key.ipv6Subnet?.toString()]).toEqual([undefined, 'fd88:0:0:5::/64']);
    for (const bad of ['10.88.5.0-24&fd88:0:0:5::1-64', 'fd88:0:0:5::-64&10.88.5.0-24', '10.88.5.0-24&10.88.6.0-24', 'a&b&c', 'fd88::-', '10.88.5.0-24&']) {
      expect(parseLeaseKey(bad), bad).toBeUndefined();
    }
    expect(() => leaseKey({})).toThrow();
  });
});

describe('sample network configs in conf/', () => {
  it.each(['flannel-network.json', 'flannel-network-dualstack.json'])('%s is accepted', (name) => {
    const text = readFileSync(join(__dirname, '../../../conf', name), 'utf8');
    const cfg = parseNetworkConfig(text);
    expect(cfg.v4?.network.toString()).toBe('10.244.0.0/16');
    if (name.includes('dualstack')) expect([cfg.v6?.network.toString(), cfg.v6?.subnetLen]).toEqual(['fd00:10:244::/56', 64]);
  });
});
