import { describe, expect, it } from 'vitest';
import { IP, Prefix } from '../../../../src/net/ip';
import { pickFree } from '../../../../src/flannel/store/acquire';
import { parseNetworkConfig } from '../../../../src/flannel/netconfig';
import type { Lease, LeaseAttrs } from '../../../../src/flannel/lease';

const P = (s: string) => Prefix.parse(s)!;
const attrs: LeaseAttrs = { publicIP: IP.parse('192.168.88.1')!, backendType: 'vxlan', vni: 1, vtepMAC: '0a:00:00:00:00:01' };

/** Leases whose subnets count how often they are read: the work pickFree does. */
function counted(subnets: string[]): { leases: Lease[]; reads: () => number } {
  let reads = 0;
  const leases = subnets.map((s) => {
    const subnet = P(s);
    return {
      attrs,
      get subnet() {
        reads++;
        return subnet;
      },
    } as Lease;
  });
  return { leases, reads: () => reads };
}

describe('pickFree', () => {
  it('one lease covering a pool of 2^20 subnets: the pool is full, found without testing each subnet', () => {
    const pool = parseNetworkConfig('{"Network":"10.0.0.0/8","SubnetLen":28,"Backend":{"Type":"vxlan"}}').v4!;
    const { leases, reads } = counted(['10.0.0.0/8']);
    expect(pickFree(pool, leases)).toBeUndefined();
    expect(reads()).toBeLessThan(10);
  });
  it('wide IPv6 leases over a pool of 2^20 subnets but one: that one is found, without a scan', () => {
    const pool = parseNetworkConfig('{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00::/44","IPv6SubnetLen":64,"Backend":{"Type":"vxlan"}}').v6!;
    let reads = 0;
    const lease = (s: string): Lease => {
      const ipv6Subnet = P(s);
      return { attrs, get ipv6Subnet() { reads++; return ipv6Subnet; } } as Lease;
    };
    // all but the pool's last /64: a /45, a /46, ..., a /64
    const at = (index: number) => `fd00:0:${(index >> 16).toString(16)}:${(index & 0xffff).toString(16)}::`;
    const leases = Array.from({ length: 20 }, (_, i) => lease(`${at(2 ** 20 - 2 ** (20 - i))}/${45 + i}`));
    const s = pickFree(pool, leases);
    expect(s?.toString()).toBe('fd00:0:f:ffff::/64');
    expect(reads).toBeLessThanOrEqual(2 * leases.length);
  });
  it('a /9 of /24s with 1,000 leases: work grows with the leases, not with the pool times the leases', () => {
    const pool = parseNetworkConfig('{"Network":"10.128.0.0/9","SubnetLen":24,"Backend":{"Type":"vxlan"}}').v4!;
    const subnets = Array.from({ length: 1000 }, (_, i) => `10.${128 + (i >> 8)}.${i & 255}.0/24`);
    const { leases, reads } = counted(subnets);
    const s = pickFree(pool, leases)!;
    expect(subnets).not.toContain(s.toString());
    expect(s.length).toBe(24);
    expect(reads()).toBeLessThanOrEqual(2 * leases.length);
  });
  it('every free subnet can be picked, and only free ones', () => {
    const pool = parseNetworkConfig('{"Network":"10.88.0.0/16","SubnetLen":26,"SubnetMin":"10.88.3.0","SubnetMax":"10.88.4.192","Backend":{"Type":"vxlan"}}').v4!;
    // 8 subnets 10.88.3.0 .. 10.88.4.192; leased: .3.64, and .4.0 + .4.64 (one /25); 10.99.0.0/24 is outside the pool
    const leases: Lease[] = [{ subnet: P('10.88.3.64/26'), attrs }, { subnet: P('10.88.4.0/25'), attrs }, { subnet: P('10.99.0.0/24'), attrs }];
    const picks = [0, 0.2, 0.4, 0.6, 0.8, 0.99].map((r) => pickFree(pool, leases, () => r)!.toString());
    expect(new Set(picks)).toEqual(new Set(['10.88.3.0/26', '10.88.3.128/26', '10.88.3.192/26', '10.88.4.128/26', '10.88.4.192/26']));
    expect(pickFree(pool, [...leases, { subnet: P('10.88.0.0/16'), attrs }])).toBeUndefined();
  });
});
