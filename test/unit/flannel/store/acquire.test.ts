// Acquiring this node's lease (src/flannel/store/acquire.ts) on the file
// store: the pool, the previous subnet, racing nodes, reservations, dual
// stack and IPv6 only. What every store must do is test/support/store-contract.ts.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IP, Prefix } from '../../../../src/net/ip';
import { FileStore } from '../../../../src/flannel/store/file-store';
import { acquireLease, pickFree } from '../../../../src/flannel/store/acquire';
import { parseNetworkConfig } from '../../../../src/flannel/netconfig';
import { Lease, LeaseAttrs } from '../../../../src/flannel/lease';

const P = (s: string) => Prefix.parse(s)!;

describe('acquiring a lease (file store)', () => {
  let dir: string;
  let store: FileStore;
  const cfg = parseNetworkConfig('{"Network":"10.88.0.0/16","SubnetLen":26,"SubnetMin":"10.88.3.0","SubnetMax":"10.88.3.192","Backend":{"Type":"vxlan"}}');
  const attrs = (n: number): LeaseAttrs => ({ publicIP: IP.parse(`192.168.88.${n}`)!, backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:00:00:0${n}` });
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'flannel-acq-'));
    store = new FileStore(dir);
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('takes a free subnet of the pool, and the same one again for the same PublicIP', async () => {
    const a = await acquireLease(store, cfg, attrs(1), { ttlS: 60 });
    expect(a.how).toBe('new');
    const again = await acquireLease(store, cfg, { ...attrs(1), vtepMAC: '0a:00:00:00:00:aa' }, { ttlS: 60 });
    expect([again.how, again.subnet?.toString()]).toEqual(['reused', a.subnet?.toString()]);
    const { leases } = await store.list();
    expect(leases).toHaveLength(1);
    expect(leases[0].attrs.vtepMAC).toBe('0a:00:00:00:00:aa');
  });
  it('prefers the previous subnet.env subnet when free', async () => {
    const a = await acquireLease(store, cfg, attrs(1), { ttlS: 60, previous: { subnet: P('10.88.3.128/26') } });
    expect([a.how, a.subnet?.toString()]).toEqual(['previous', '10.88.3.128/26']);
    const b = await acquireLease(store, cfg, attrs(2), { ttlS: 60, previous: { subnet: P('10.88.3.128/26') } });
    expect(b.how).toBe('new');
    expect(b.subnet?.toString()).not.toBe('10.88.3.128/26');
  });
  it('nodes starting at once never share a subnet; a full pool is a clear error and writes nothing', async () => {
    const results = await Promise.all([1, 2, 3, 4].map((n) => acquireLease(new FileStore(dir), cfg, attrs(n), { ttlS: 60 })));
    expect(new Set(results.map((r) => r.subnet?.toString())).size).toBe(4);
    await expect(acquireLease(store, cfg, attrs(5), { ttlS: 60 })).rejects.toThrow(/no free subnet: all 4 \/26 subnets from 10.88.3.0 to 10.88.3.192/);
    expect((await store.list()).leases).toHaveLength(4);
  });
  it('the same random pick by racing nodes: the loser retries and gets another subnet', async () => {
    const alwaysFirst = () => 0;
    const [a, b] = await Promise.all([
      acquireLease(new FileStore(dir), cfg, attrs(1), { ttlS: 60, random: alwaysFirst }),
      acquireLease(new FileStore(dir), cfg, attrs(2), { ttlS: 60, random: alwaysFirst }),
    ]);
    expect(a.subnet?.toString()).not.toBe(b.subnet?.toString());
  });
  it('a reservation of ours (a lease file without "Expiration", written by hand) is adopted and stays one', async () => {
    const file = join(dir, 'subnets', '10.88.3.64-26');
    mkdirSync(join(dir, 'subnets'), { recursive: true });
    writeFileSync(file, '{"PublicIP":"192.168.88.1","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:00:00:00:00:01"}}');
    const a = await acquireLease(store, cfg, attrs(1), { ttlS: 60 });
    expect([a.how, a.subnet?.toString(), a.permanent]).toEqual(['reused', '10.88.3.64/26', true]);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ PublicIP: '192.168.88.1', BackendType: 'vxlan', BackendData: { VNI: 1, VtepMAC: '0a:00:00:00:00:01' } });
    expect((await store.list()).leases[0].permanent).toBe(true);
  });
  it('pickFree in a huge pool still finds the one free subnet', () => {
    const big = parseNetworkConfig('{"Network":"10.0.0.0/8","SubnetLen":30,"Backend":{"Type":"vxlan"}}');
    const leases: Lease[] = [{ subnet: P('10.0.0.0/9'), attrs: attrs(1) }];
    const s = pickFree(big.v4!, leases)!;
    expect(P('10.128.0.0/9').contains(s.network)).toBe(true);
  });
});

describe('acquiring dual-stack and IPv6-only leases (file store)', () => {
  let dir: string;
  let store: FileStore;
  const dualCfg = parseNetworkConfig(
    '{"Network":"10.88.0.0/16","SubnetLen":26,"SubnetMin":"10.88.3.0","SubnetMax":"10.88.3.192","EnableIPv6":true,"IPv6Network":"fd88::/60","Backend":{"Type":"vxlan"}}',
  );
  const v6Cfg = parseNetworkConfig('{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd88::/62","Backend":{"Type":"vxlan"}}');
  const attrs6 = (n: number, v4 = true): LeaseAttrs => ({
    ...(v4 ? { publicIP: IP.parse(`192.168.88.${n}`)!, vni: 1, vtepMAC: `0a:00:00:00:04:0${n}` } : {}),
    publicIPv6: IP.parse(`fd88:88::${n}`)!,
    backendType: 'vxlan',
    v6Vni: 1,
    v6VtepMAC: `0a:00:00:00:06:0${n}`,
  });
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'flannel-acq6-'));
    store = new FileStore(dir);
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('a dual-stack lease holds one subnet of each family, in a file named as flannel\'s etcd key', async () => {
    const a = await acquireLease(store, dualCfg, attrs6(1), { ttlS: 60 });
    expect(a.how).toBe('new');
    expect(P('10.88.3.0/24').contains(a.subnet!.network) && a.subnet!.length === 26).toBe(true);
    expect(P('fd88::/60').contains(a.ipv6Subnet!.network) && a.ipv6Subnet!.length === 64).toBe(true);
    const file = join(dir, 'subnets', `${a.subnet!.network}-26&${a.ipv6Subnet!.network}-64`);
    const json = JSON.parse(readFileSync(file, 'utf8'));
    expect(Object.keys(json)).toEqual(['PublicIP', 'PublicIPv6', 'BackendType', 'BackendData', 'BackendV6Data', 'Expiration']);
    const again = await acquireLease(store, dualCfg, attrs6(1), { ttlS: 60 });
    expect([again.how, again.subnet?.toString(), again.ipv6Subnet?.toString()]).toEqual(['reused', a.subnet?.toString(), a.ipv6Subnet?.toString()]);
  });
  it('nodes starting at once never share a subnet of either family; the IPv6 pool can be the one that runs out', async () => {
    // fd88::/60 skips its first /64: 15 IPv6 subnets, 4 IPv4 ones
    const results = await Promise.all([1, 2, 3, 4].map((n) => acquireLease(new FileStore(dir), dualCfg, attrs6(n), { ttlS: 60, random: () => 0 })));
    expect(new Set(results.map((r) => r.subnet?.toString())).size).toBe(4);
    expect(new Set(results.map((r) => r.ipv6Subnet?.toString())).size).toBe(4);
    const small = parseNetworkConfig('{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::/62","IPv6SubnetMin":"fd88:0:0:3::","Backend":{"Type":"vxlan"}}');
    const other = new FileStore(join(dir, 'small'));
    await acquireLease(other, small, attrs6(5), { ttlS: 60 });
    await expect(acquireLease(other, small, attrs6(6), { ttlS: 60 })).rejects.toThrow(/no free subnet: all 1 \/64 subnets from fd88:0:0:3:: to fd88:0:0:3:: of fd88::\/62/);
  });
  it('IPv6 only: keyed by the IPv6 subnet, found again by PublicIPv6, the previous subnet.env subnet preferred', async () => {
    const a = await acquireLease(store, v6Cfg, attrs6(1, false), { ttlS: 60, previous: { ipv6Subnet: P('fd88:0:0:2::/64') } });
    expect([a.how, a.subnet, a.ipv6Subnet?.toString()]).toEqual(['previous', undefined, 'fd88:0:0:2::/64']);
    expect(readdirSync(join(dir, 'subnets'))).toEqual(['fd88:0:0:2::-64']);
    expect(JSON.parse(readFileSync(join(dir, 'subnets', 'fd88:0:0:2::-64'), 'utf8')).PublicIP).toBe('0.0.0.0');
    const again = await acquireLease(store, v6Cfg, { ...attrs6(1, false), v6VtepMAC: '0a:00:00:00:06:aa' }, { ttlS: 60 });
    expect([again.how, again.ipv6Subnet?.toString()]).toEqual(['reused', 'fd88:0:0:2::/64']);
    // another IPv6-only node (PublicIP "0.0.0.0" too) is not mistaken for us
    const b = await acquireLease(store, v6Cfg, attrs6(2, false), { ttlS: 60 });
    expect(b.how).toBe('new');
    expect(b.ipv6Subnet?.toString()).not.toBe('fd88:0:0:2::/64');
  });
  it('an IPv4 overlay gaining IPv6: our IPv4-only lease is replaced by a dual-stack one with the same IPv4 subnet', async () => {
    const v4Cfg = parseNetworkConfig('{"Network":"10.88.0.0/16","SubnetLen":26,"SubnetMin":"10.88.3.0","SubnetMax":"10.88.3.192","Backend":{"Type":"vxlan"}}');
    const { publicIP, vni, vtepMAC } = attrs6(1);
    const a = await acquireLease(store, v4Cfg, { publicIP, vni, vtepMAC, backendType: 'vxlan' }, { ttlS: 60 });
    const logs: string[] = [];
    const b = await acquireLease(store, dualCfg, attrs6(1), { ttlS: 60, log: (m) => logs.push(m) });
    expect(b.subnet?.toString()).toBe(a.subnet?.toString());
    expect(b.ipv6Subnet).toBeDefined();
    expect(readdirSync(join(dir, 'subnets'))).toEqual([`${a.subnet!.network}-26&${b.ipv6Subnet!.network}-64`]);
    expect(logs.join('\n')).toMatch(/does not fit the network config: replacing it/);
  });
});

const anyAttrs: LeaseAttrs = { publicIP: IP.parse('192.168.88.1')!, backendType: 'vxlan', vni: 1, vtepMAC: '0a:00:00:00:00:01' };

/** Leases whose subnets count how often they are read: the work pickFree does. */
function counted(subnets: string[]): { leases: Lease[]; reads: () => number } {
  let reads = 0;
  const leases = subnets.map((s) => {
    const subnet = P(s);
    return {
      attrs: anyAttrs,
      get subnet() {
        reads++;
        return subnet;
      },
    } as Lease;
  });
  return { leases, reads: () => reads };
}

describe('pickFree: the cost follows the leases, not the pool', () => {
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
      return { attrs: anyAttrs, get ipv6Subnet() { reads++; return ipv6Subnet; } } as Lease;
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
    const leases: Lease[] = [{ subnet: P('10.88.3.64/26'), attrs: anyAttrs }, { subnet: P('10.88.4.0/25'), attrs: anyAttrs }, { subnet: P('10.99.0.0/24'), attrs: anyAttrs }];
    const picks = [0, 0.2, 0.4, 0.6, 0.8, 0.99].map((r) => pickFree(pool, leases, () => r)!.toString());
    expect(new Set(picks)).toEqual(new Set(['10.88.3.0/26', '10.88.3.128/26', '10.88.3.192/26', '10.88.4.128/26', '10.88.4.192/26']));
    expect(pickFree(pool, [...leases, { subnet: P('10.88.0.0/16'), attrs: anyAttrs }])).toBeUndefined();
  });
});
