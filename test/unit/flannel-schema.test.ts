import { describe, expect, it } from 'vitest';
import { Prefix } from '../../src/net/ip';
import { formatSubnetEnv, parseSubnetEnv, requireComplete } from '../../src/flannel/subnet-env';
import { ConfigError, formatNetworkConfig, parseNetworkConfig, poolSize } from '../../src/flannel/netconfig';
import { decodeAttrs, encodeAttrs, parseSubnetKey, subnetKey } from '../../src/flannel/lease';

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
    expect([c.subnetLen, c.subnetMin.toString(), c.subnetMax.toString(), c.vni, c.port]).toEqual([24, '10.88.1.0', '10.88.255.0', 1, 8472]);
    expect(poolSize(c)).toBe(255n);
    expect(c.mtu).toBeUndefined();
  });
  it('splits small networks in four, keeps explicit values', () => {
    expect(parseNetworkConfig('{"Network":"10.88.0.0/26"}').subnetLen).toBe(28);
    const c = parseNetworkConfig('{"Network":"10.88.0.0/16","SubnetLen":26,"SubnetMin":"10.88.3.0","SubnetMax":"10.88.3.192","Backend":{"Type":"vxlan","VNI":42,"Port":4789,"MTU":1400}}');
    expect([c.subnetLen, c.subnetMin.toString(), c.subnetMax.toString(), c.vni, c.port, c.mtu]).toEqual([26, '10.88.3.0', '10.88.3.192', 42, 4789, 1400]);
    expect(poolSize(c)).toBe(4n);
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
    ['{"Network":"10.88.0.0/16","Backend":{"Type":"udp"}}', /Backend.Type/],
    ['{"Network":"10.88.0.0/16","Backend":{"VNI":"1"}}', /Backend.VNI/],
    ['{"Network":"10.88.0.0/16","Backend":{"Port":70000}}', /Backend.Port/],
    ['{"Network":"10.88.0.0/16","EnableIPv6":true}', /IPv6/],
  ])('rejects %s', (text, msg) => {
    expect(() => parseNetworkConfig(text)).toThrow(ConfigError);
    expect(() => parseNetworkConfig(text)).toThrow(msg);
  });
  it('network set writes flannel field names and refuses what the daemon would refuse', () => {
    expect(formatNetworkConfig({ network: '10.88.0.0/16', subnetLen: 24, vni: 7, port: 4789 })).toBe(
      '{"Network":"10.88.0.0/16","SubnetLen":24,"Backend":{"Type":"vxlan","VNI":7,"Port":4789}}',
    );
    expect(() => formatNetworkConfig({ network: '10.88.0.0/16', subnetLen: 16 })).toThrow(/four/);
  });
});

describe('lease schema', () => {
  const flannelJson = '{"PublicIP":"192.168.88.9","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:58:0a:58:09:00"}}';
  it('encodes exactly what flanneld writes', () => {
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
    expect(parseSubnetKey('10.88.5.0-24')?.toString()).toBe('10.88.5.0/24');
    expect(parseSubnetKey('10.88.5.0-24&fd00::-64')?.toString()).toBe('10.88.5.0/24');
    expect(parseSubnetKey('10.88.5.1-24')).toBeUndefined();
    expect(parseSubnetKey('junk')).toBeUndefined();
  });
});
