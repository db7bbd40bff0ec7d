// Chosen leases: acquisition (acquire.ts) against a store with etcd's
// semantics, the store manager, and the LeaseKeeper that keeps our lease
// (renewal timer, retries, reservations, the own-lease check, one write at a
// time), with fake timers: hours of lease life in milliseconds.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { IP, Prefix } from '../../../../src/net/ip';
import { acquireLease } from '../../../../src/flannel/store/acquire';
import { LeaseAttrs, decodeAttrs, encodeAttrs } from '../../../../src/flannel/lease';
import { renewMarginS, renewRetryMs } from '../../../../src/flannel/store/lease-keeper';
import type { HeldLease } from '../../../../src/flannel/manager';
import { parseNetworkConfig } from '../../../../src/flannel/netconfig';
import { StoreManager } from '../../../../src/flannel/store/store-manager';
import { MemStore } from '../../../support/mem-store';

const P = (s: string) => Prefix.parse(s)!;
const cfg = parseNetworkConfig('{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan"}}');
const hooks = () => ({ log: () => {}, resync: () => {} });
const attrsOf = (n: number): LeaseAttrs => ({ publicIP: IP.parse(`192.168.88.${n}`)!, backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:00:00:0${n}` });

describe('acquiring a lease against etcd semantics', () => {
  let store: MemStore;
  beforeEach(() => {
    store = new MemStore();
  });

  it('our own lease as flanneld writes it ("PublicIPv6":null) or by hand (other spacing) is reused', async () => {
    // flanneld: LeaseAttrs.PublicIPv6 is a pointer without omitempty
    store.put('10.88.7.0-24', '{"PublicIP":"192.168.88.1","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:00:00:00:00:01"}}', 600);
    store.put('10.88.8.0-24', '{ "PublicIP": "192.168.88.2", "BackendType": "vxlan", "BackendData": { "VtepMAC": "0A:00:00:00:00:02", "VNI": 1 } }', 600);
    const a = await acquireLease(store, cfg, attrsOf(1), { ttlS: 60 });
    expect([a.how, a.subnet?.toString()]).toEqual(['reused', '10.88.7.0/24']);
    const b = await acquireLease(store, cfg, attrsOf(2), { ttlS: 60 });
    expect([b.how, b.subnet?.toString()]).toEqual(['reused', '10.88.8.0/24']);
    // re-written in our spelling
    expect(store.entries.get('10.88.7.0-24')!.raw).toBe(encodeAttrs(attrsOf(1)));
  });

  it('a reservation of ours (a key without an etcd lease) is adopted and stays a reservation', async () => {
    store.put('10.88.9.0-24', '{"PublicIP":"192.168.88.1","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:00:00:00:00:01"}}', 0);
    const a = await acquireLease(store, cfg, { ...attrsOf(1), vtepMAC: '0a:00:00:00:00:a1' }, { ttlS: 86400 });
    expect([a.how, a.subnet?.toString(), a.permanent]).toEqual(['reused', '10.88.9.0/24', true]);
    expect(store.calls).toContain('renew 10.88.9.0-24 ttl=0');
    const e = store.entries.get('10.88.9.0-24')!;
    expect([e.lease, e.expiresAt, decodeAttrs(e.raw).vtepMAC]).toEqual([0, undefined, '0a:00:00:00:00:a1']);
    // an ordinary lease of ours keeps its TTL
    store.put('10.88.10.0-24', encodeAttrs(attrsOf(2)), 600);
    const b = await acquireLease(store, cfg, attrsOf(2), { ttlS: 86400 });
    expect([b.how, b.permanent]).toEqual(['reused', undefined]);
    expect(store.entries.get('10.88.10.0-24')!.lease).not.toBe(0);
  });

  it('the guard still refuses a lease that changed between the list and the renewal', async () => {
    store.put('10.88.7.0-24', encodeAttrs(attrsOf(1)), 600);
    let once = true;
    store.afterList = () => {
      if (!once) return;
      once = false;
      store.put('10.88.7.0-24', encodeAttrs({ ...attrsOf(1), vtepMAC: '0a:00:00:00:00:99' }), 600); // another writer
    };
    const logs: string[] = [];
    const a = await acquireLease(store, cfg, attrsOf(1), { ttlS: 60, log: (m) => logs.push(m) });
    expect(a.how).toBe('reused');
    expect(store.calls.filter((c) => c.startsWith('renew'))).toHaveLength(2); // refused once, then done on the fresh value
  });
});

describe('the store manager', () => {
  let store: MemStore;
  beforeEach(() => {
    store = new MemStore();
  });
  const manager = (o: { leaseTtlS?: number; previous?: { subnet: ReturnType<typeof P> } } = {}) => new StoreManager(store, { leaseTtlS: 600, ...o });

  it('reads the network config from the store, saying what is missing or wrong', async () => {
    expect((await manager().getNetworkConfig()).v4?.network.toString()).toBe('10.88.0.0/16');
    store.config = undefined;
    await expect(manager().getNetworkConfig()).rejects.toThrow('mem store has no network config; set one with `vxlan-flannel network set --network CIDR`');
    store.config = '{"Network":"10.88.0.1/16","Backend":{"Type":"vxlan"}}';
    await expect(manager().getNetworkConfig()).rejects.toThrow(/^bad network config in mem store: network config field "Network" 10.88.0.1\/16 has host bits set/);
  });

  it('previousAttrs is what this node advertised in its lease, found by PublicIP (PublicIPv6 on an IPv6-only overlay)', async () => {
    store.put('10.88.7.0-24', encodeAttrs(attrsOf(1)), 600);
    store.put('10.88.8.0-24', encodeAttrs(attrsOf(2)), 600);
    expect((await manager().previousAttrs(cfg, { publicIP: IP.parse('192.168.88.2')! }))?.vtepMAC).toBe('0a:00:00:00:00:02');
    expect(await manager().previousAttrs(cfg, { publicIP: IP.parse('192.168.88.3')! })).toBeUndefined();
    const v6 = parseNetworkConfig('{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd88::/48","Backend":{"Type":"vxlan"}}');
    store.put('fd88:0:0:5::-64', '{"PublicIP":"0.0.0.0","PublicIPv6":"fd88:88::5","BackendType":"vxlan","BackendV6Data":{"VNI":1,"VtepMAC":"0a:00:00:00:06:05"}}', 600);
    expect((await manager().previousAttrs(v6, { publicIPv6: IP.parse('fd88:88::5')! }))?.v6VtepMAC).toBe('0a:00:00:00:06:05');
  });

  it('acquires with the previous subnet.env\'s subnet when free, and says how', async () => {
    const lease = await manager({ previous: { subnet: P('10.88.42.0/24') } }).acquireLease(cfg, attrsOf(1), hooks());
    expect([lease.subnet?.toString(), lease.how]).toEqual(['10.88.42.0/24', 'previous']);
    expect(lease.listed.leases).toEqual([]); // the list it was chosen from: before our own lease existed
    expect(store.calls).toContain('create 10.88.42.0-24 ttl=600');
    lease.stop();
  });

  it('a join reads the leases once: acquireLease chooses from the list previousAttrs just read, and creates from it', async () => {
    store.put('10.88.7.0-24', encodeAttrs(attrsOf(2)), 600);
    const m = manager({ previous: { subnet: P('10.88.42.0/24') } });
    expect(await m.previousAttrs(cfg, attrsOf(1))).toBeUndefined();
    const lease = await m.acquireLease(cfg, attrsOf(1), hooks());
    expect(lease.subnet?.toString()).toBe('10.88.42.0/24');
    expect(store.calls.filter((c) => c === 'list')).toHaveLength(1);
    lease.stop();
    // a list that went stale meanwhile costs a retry, never a subnet twice
    const other = manager();
    await other.previousAttrs(cfg, attrsOf(3));
    store.put('10.88.99.0-24', encodeAttrs(attrsOf(4)), 600); // written after that list
    const third = await other.acquireLease(cfg, attrsOf(3), hooks());
    expect(store.calls.filter((c) => c === 'list').length).toBeGreaterThan(2);
    expect(['10.88.7.0/24', '10.88.42.0/24', '10.88.99.0/24']).not.toContain(third.subnet?.toString());
    third.stop();
  });

  it('a full pool is an error that says the daemon waits', async () => {
    store.config = '{"Network":"10.88.0.0/16","SubnetMin":"10.88.5.0","SubnetMax":"10.88.5.0","Backend":{"Type":"vxlan"}}';
    store.put('10.88.5.0-24', encodeAttrs(attrsOf(2)), 600);
    const m = manager();
    await expect(m.acquireLease(await m.getNetworkConfig(), attrsOf(1), hooks())).rejects.toThrow(
      'no free subnet: all 1 /24 subnets from 10.88.5.0 to 10.88.5.0 of 10.88.0.0/16 are leased; waiting for a lease to be released or to expire',
    );
  });

  it('leaseChanges: a new list compared with the last by identity (a changed lease is both removed and added; unchanged ones are neither); undefined for another revision or a store that is down', async () => {
    for (const n of [1, 2, 3]) store.put(`10.88.${n}.0-24`, encodeAttrs(attrsOf(n)), 600);
    const m = manager();
    const listed = await m.listLeases();
    const byNet = (n: number) => listed.leases.find((l) => l.subnet!.toString() === `10.88.${n}.0/24`)!;
    expect(await m.leaseChanges(listed.revision!)).toEqual({ removed: [], added: [], bad: [], revision: listed.revision });
    store.put('10.88.2.0-24', encodeAttrs({ ...attrsOf(2), vtepMAC: '0a:00:00:00:00:22' }), 600); // changed
    store.del('10.88.3.0-24'); // gone
    store.put('10.88.4.0-24', encodeAttrs(attrsOf(4)), 600); // new
    store.put('10.88.1.0-24', encodeAttrs(attrsOf(1)), 600); // written again, the same value: a new entry, so both
    const d = (await m.leaseChanges(listed.revision!))!;
    expect(d.removed).toEqual(expect.arrayContaining([byNet(1), byNet(2), byNet(3)]));
    expect(d.removed).toHaveLength(3);
    expect(d.added.map((l) => [l.subnet!.toString(), l.attrs.vtepMAC]).sort()).toEqual([
      ['10.88.1.0/24', '0a:00:00:00:00:01'],
      ['10.88.2.0/24', '0a:00:00:00:00:22'],
      ['10.88.4.0/24', '0a:00:00:00:00:04'],
    ]);
    const again = (await m.leaseChanges(d.revision))!;
    expect([again.removed, again.added]).toEqual([[], []]); // nothing since: the same objects
    expect(await m.leaseChanges(listed.revision!)).toBeUndefined(); // not the last list's revision
    store.down = true;
    expect(await m.leaseChanges(again.revision)).toBeUndefined(); // the daemon's own list says what is wrong
  });

  it('leaseChanges: a store that tells its changes is asked, not listed; leases not of the SubnetLen are filtered as a list is; another SubnetLen since: undefined', async () => {
    for (const n of [1, 2]) store.put(`10.88.${n}.0-24`, encodeAttrs(attrsOf(n)), 600);
    store.put('10.88.128.0-25', encodeAttrs(attrsOf(3)), 600); // not a /24: never a peer
    const m = manager();
    await m.getNetworkConfig();
    const listed = await m.listLeases();
    expect(listed.leases).toHaveLength(2);
    const [one, small] = [listed.leases[0], { subnet: P('10.88.129.0/25'), attrs: attrsOf(4) }];
    const fresh = { subnet: P('10.88.5.0/24'), attrs: attrsOf(5) };
    const told: unknown[] = [];
    Object.assign(store, {
      changes: async (since: string) => {
        told.push(since);
        return { removed: [one, { subnet: P('10.88.128.0/25'), attrs: attrsOf(3) }], added: [fresh, small], bad: [], revision: 'r2' };
      },
    });
    const lists = store.calls.filter((c) => c === 'list').length;
    const d = (await m.leaseChanges(listed.revision!))!;
    expect(told).toEqual([listed.revision]);
    expect(store.calls.filter((c) => c === 'list')).toHaveLength(lists);
    expect([d.removed, d.added, d.revision]).toEqual([[one], [fresh], 'r2']);
    expect(d.bad).toEqual([{ key: '10.88.129.0-25', why: "its subnet 10.88.129.0/25 is not of the network config's SubnetLen 24: not programmed" }]);
    expect(await m.leaseChanges(listed.revision!)).toBeUndefined(); // counts from r2 now
    store.config = '{"Network":"10.88.0.0/16","SubnetLen":25,"Backend":{"Type":"vxlan"}}';
    await m.getNetworkConfig();
    expect(await m.leaseChanges('r2')).toBeUndefined(); // filtered by another length: the daemon lists
    expect(told).toHaveLength(1);
  });

  it('tidy: a store that cannot expire old leases says so', async () => {
    await manager().tidy(); // etcd expires keys itself: nothing to do
    Object.assign(store, {
      expire: async () => {
        throw new Error('EACCES');
      },
    });
    await expect(manager().tidy()).rejects.toThrow('cannot expire old leases: EACCES');
  });
});

describe('the lease keeper', () => {
  let store: MemStore;
  let logs: string[];
  let resyncs: string[];
  let held: HeldLease[];
  beforeEach(() => {
    vi.useFakeTimers();
    store = new MemStore();
    logs = [];
    resyncs = [];
    held = [];
  });
  afterEach(() => {
    for (const l of held) l.stop();
    vi.useRealTimers();
  });
  const keep = async (ttlS: number, attrs = attrsOf(1)): Promise<HeldLease> => {
    const lease = await new StoreManager(store, { leaseTtlS: ttlS }).acquireLease(cfg, attrs, {
      log: (m) => logs.push(m),
      resync: (why) => resyncs.push(why),
    });
    held.push(lease);
    return lease;
  };
  const renewals = () => store.calls.filter((c) => c.startsWith('renew'));
  const key = (l: HeldLease) => `${l.subnet!.network}-${l.subnet!.length}`;

  it('renews at TTL − min(1 h, TTL/2), then again a margin before each new expiry', async () => {
    expect([renewMarginS(86400), renewMarginS(100)]).toEqual([3600, 50]);
    const day = await keep(86400);
    const short = await keep(100, attrsOf(2));
    await vi.advanceTimersByTimeAsync(49_999);
    expect(renewals()).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(renewals()).toEqual([`renew ${key(short)} ttl=100`]);
    await vi.advanceTimersByTimeAsync(50_000);
    expect(renewals()).toHaveLength(2);
    const before = renewals().length;
    await vi.advanceTimersByTimeAsync(82_800_000 - 100_000); // the 24 h lease: 23 h after it was written
    expect(renewals().filter((c) => c === `renew ${key(day)} ttl=86400`)).toHaveLength(1);
    expect(renewals().length - before).toBe(1 + (82_800_000 - 100_000) / 50_000);
    expect(store.entries.get(key(day))!.expiresAt).toBe(Date.now() + 86_400_000);
    expect(logs).toContain(`renewed lease ${day.subnet} for 86400 s`);
  });

  it('--subnet-lease-renew-margin: renews that long before expiry, at most half the TTL', async () => {
    expect([renewMarginS(86400, 1800), renewMarginS(100, 1800), renewRetryMs(86400, 300)]).toEqual([1800, 50, 30_000]);
    const lease = await new StoreManager(store, { leaseTtlS: 86400, renewMarginS: 1800 }).acquireLease(cfg, attrsOf(1), { log: (m) => logs.push(m), resync: () => {} });
    held.push(lease);
    await vi.advanceTimersByTimeAsync((86400 - 1800) * 1000 - 1);
    expect(renewals()).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(renewals()).toEqual([`renew ${key(lease)} ttl=86400`]);
  });

  it('a renewal that fails is retried every TTL/20 (1 s to 1 min), logged once until it succeeds', async () => {
    expect([renewRetryMs(100), renewRetryMs(10), renewRetryMs(86400)]).toEqual([5000, 1000, 60_000]);
    const lease = await keep(100);
    store.down = true;
    await vi.advanceTimersByTimeAsync(50_000 + 3 * 5000);
    expect(renewals()).toHaveLength(4);
    expect(logs.filter((l) => l.startsWith('cannot renew'))).toEqual([`cannot renew lease ${lease.subnet}: etcd mem unreachable: connection refused; retrying every 5 s`]);
    store.down = false;
    await vi.advanceTimersByTimeAsync(5000);
    expect(logs.at(-1)).toBe(`renewed lease ${lease.subnet} for 100 s`);
    store.down = true; // a new outage is reported again
    await vi.advanceTimersByTimeAsync(50_000);
    expect(logs.filter((l) => l.startsWith('cannot renew'))).toHaveLength(2);
  });

  it('a renewal refused (the key holds another value now) is not forced: logged once, a reconcile asked for, retried', async () => {
    const lease = await keep(100);
    store.put(key(lease), encodeAttrs(attrsOf(9)), 600); // another node wrote our key
    await vi.advanceTimersByTimeAsync(50_000 + 2 * 5000);
    expect(renewals()).toHaveLength(3);
    expect(decodeAttrs(store.entries.get(key(lease))!.raw).publicIP?.toString()).toBe('192.168.88.9');
    expect(logs.filter((l) => l.startsWith('cannot renew'))).toEqual([`cannot renew lease ${lease.subnet}: it now holds another node's data`]);
    expect(resyncs).toEqual(['lease renewal refused', 'lease renewal refused', 'lease renewal refused']);
  });

  it('a reservation is never renewed; an operator turning it into a lease with a TTL (or back) is followed at the next check', async () => {
    store.put('10.88.9.0-24', encodeAttrs(attrsOf(1)), 0);
    const lease = await keep(100);
    expect([lease.subnet?.toString(), lease.how]).toEqual(['10.88.9.0/24', 'reused, a reservation: kept without a TTL']);
    await vi.advanceTimersByTimeAsync(3600_000);
    expect(renewals()).toEqual(['renew 10.88.9.0-24 ttl=0']); // the adoption itself, without a TTL
    store.put('10.88.9.0-24', store.entries.get('10.88.9.0-24')!.raw, 100); // now on an etcd lease
    expect(await lease.check((await store.list()).leases)).toBe(false);
    await vi.advanceTimersByTimeAsync(50_000);
    expect(renewals().at(-1)).toBe('renew 10.88.9.0-24 ttl=100');
    store.put('10.88.9.0-24', store.entries.get('10.88.9.0-24')!.raw, 0); // a reservation again
    await lease.check((await store.list()).leases);
    const n = renewals().length;
    await vi.advanceTimersByTimeAsync(3600_000);
    expect(renewals()).toHaveLength(n);
  });

  it('check: a lease deleted by hand is created again; one changed by hand is re-written, guarded by the value as stored', async () => {
    const lease = await keep(600);
    store.del(key(lease));
    expect(await lease.check((await store.list()).leases)).toBe(true);
    expect(store.calls.at(-2)).toBe(`create ${key(lease)} ttl=600`);
    expect(logs.at(-1)).toBe(`lease ${lease.subnet} was gone in the store: written again`);
    const byHand = encodeAttrs({ ...attrsOf(1), vtepMAC: '0a:00:00:00:00:77' }).replace(',', ', ');
    store.put(key(lease), byHand, 600);
    expect(await lease.check((await store.list()).leases)).toBe(true);
    expect(store.entries.get(key(lease))!.raw).toBe(encodeAttrs(attrsOf(1)));
    expect(logs.at(-1)).toBe(`lease ${lease.subnet} was changed in the store: written again`);
    expect(await lease.check((await store.list()).leases)).toBe(false); // as we wrote it: nothing to do
  });

  it('check: a subnet of ours now held by another node is a conflict, logged once and left alone', async () => {
    const lease = await keep(600);
    store.put(key(lease), encodeAttrs(attrsOf(9)), 600);
    for (let i = 0; i < 3; i++) expect(await lease.check((await store.list()).leases)).toBe(false);
    expect(logs.filter((l) => l.startsWith('CONFLICT'))).toEqual([`CONFLICT: subnet ${lease.subnet} is now leased by 192.168.88.9; leaving it alone`]);
    expect(store.calls.filter((c) => c.startsWith('create') || c.startsWith('renew'))).toEqual([`create ${key(lease)} ttl=600`]);
  });

  it('writes of the lease run one at a time: a check never overlaps a slow renewal', async () => {
    const lease = await keep(100);
    store.renewDelayMs = 3000;
    await vi.advanceTimersByTimeAsync(50_000); // the renewal starts and waits on the slow store
    store.put(key(lease), encodeAttrs({ ...attrsOf(1), vtepMAC: '0a:00:00:00:00:77' }), 600); // changed by hand: check() re-writes
    const checked = lease.check((await store.list()).leases);
    await vi.advanceTimersByTimeAsync(10_000);
    await checked;
    expect(renewals().length).toBeGreaterThanOrEqual(2);
    expect(store.maxConcurrentRenewals).toBe(1);
  });

  it('release waits for a renewal in flight, then deletes the lease; nothing is renewed after', async () => {
    const lease = await keep(100);
    store.renewDelayMs = 3000;
    await vi.advanceTimersByTimeAsync(50_000);
    const released = lease.release();
    await vi.advanceTimersByTimeAsync(3000);
    await released;
    expect(store.calls.slice(-2)).toEqual([`renew ${key(lease)} ttl=100`, `remove ${key(lease)}`]);
    expect(store.entries.has(key(lease))).toBe(false);
    await vi.advanceTimersByTimeAsync(3600_000);
    expect(store.calls.at(-1)).toBe(`remove ${key(lease)}`);
  });

  it('abandon gives back a lease this start created, and leaves one it reused', async () => {
    const created = await keep(600);
    await created.abandon();
    expect(store.entries.has(key(created))).toBe(false);
    store.put('10.88.9.0-24', encodeAttrs(attrsOf(2)), 600);
    const reused = await keep(600, attrsOf(2));
    expect(reused.how).toBe('reused');
    await reused.abandon();
    expect(store.entries.has('10.88.9.0-24')).toBe(true);
    await vi.advanceTimersByTimeAsync(3600_000);
    expect(renewals()).toEqual(['renew 10.88.9.0-24 ttl=600']); // the adoption; abandoned leases are not renewed
  });
});
