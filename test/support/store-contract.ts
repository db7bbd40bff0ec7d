// What every lease store (src/flannel/store/store.ts) must do, as one suite run
// against each: MemStore (the store the daemon's unit tests run on) and
// FileStore in unit tests, EtcdStore against a real etcd in
// test/integration/flannel-etcd.test.ts. A store that passes here can stand in
// for another; what differs by design (how a renewal compares values, expiry,
// housekeeping) stays in each store's own tests.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { IP, Prefix } from '../../src/net/ip';
import { encodeAttrs, type LeaseAttrs, type LeaseSubnets } from '../../src/flannel/lease';
import type { LeaseStore } from '../../src/flannel/store/store';
import { waitFor } from './wait';

/** A fresh, empty store for one test, and how to get rid of it. */
export type StoreFactory = () => Promise<{ store: LeaseStore; dispose?: () => Promise<void> | void }>;

const P = (s: string) => Prefix.parse(s)!;
const attrs = (n: number): LeaseAttrs => ({ publicIP: IP.parse(`192.168.88.${n}`)!, backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:00:00:0${n}` });
const dualAttrs = (n: number): LeaseAttrs => ({ ...attrs(n), publicIPv6: IP.parse(`fd88:88::${n}`)!, v6Vni: 1, v6VtepMAC: `0a:00:00:00:06:0${n}` });
const A: LeaseSubnets = { subnet: P('10.88.3.0/24') };
const B: LeaseSubnets = { subnet: P('10.88.4.0/24') };

/** A watch that keeps changes and errors apart (a watch that only ever fails must not look like one that works). */
function watching(store: LeaseStore, after?: string) {
  const changes: string[] = [];
  const errors: string[] = [];
  const stop = store.watch((why) => changes.push(why), (err) => errors.push(err.message), after);
  return { changes, errors, stop };
}

export function leaseStoreContract(name: string, make: StoreFactory, opts: { watchTimeoutMs?: number } = {}): void {
  const watchTimeoutMs = opts.watchTimeoutMs ?? 30_000;
  describe(`${name}: the lease store contract`, () => {
    let store: LeaseStore;
    let dispose: (() => Promise<void> | void) | undefined;
    beforeEach(async () => {
      ({ store, dispose } = await make());
    });
    afterEach(async () => {
      await store.close();
      await dispose?.();
    });

    const listed = async () => (await store.list()).leases.map((l) => ({ subnet: l.subnet?.toString(), ipv6: l.ipv6Subnet?.toString(), ip: l.attrs.publicIP?.toString(), permanent: !!l.permanent }));

    it('keeps the network config it is given', async () => {
      const text = '{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan"}}';
      await store.setConfig(text);
      expect(await store.getConfig()).toBe(text);
    });

    it('create: a free subnet is taken once; the same key, or a subnet overlapping it, is refused and changes nothing', async () => {
      expect(await store.create(A, attrs(1), 60)).toBe(true);
      expect(await store.create(A, attrs(2), 60)).toBe(false);
      expect(await store.create({ subnet: P('10.88.3.128/25') }, attrs(2), 60)).toBe(false);
      expect(await store.create({ subnet: P('10.88.0.0/22') }, attrs(2), 60)).toBe(false);
      expect(await listed()).toEqual([{ subnet: '10.88.3.0/24', ipv6: undefined, ip: '192.168.88.1', permanent: false }]);
      const [lease] = (await store.list()).leases;
      expect(lease.attrs).toMatchObject({ backendType: 'vxlan', vni: 1, vtepMAC: '0a:00:00:00:00:01' });
      expect(lease.raw).toBeDefined();
    });

    it('create: a dual-stack lease is refused when another key holds either half', async () => {
      expect(await store.create({ subnet: P('10.88.3.0/24'), ipv6Subnet: P('fd88:0:0:1::/64') }, dualAttrs(1), 60)).toBe(true);
      expect(await store.create({ subnet: P('10.88.4.0/24'), ipv6Subnet: P('fd88:0:0:1::/64') }, dualAttrs(2), 60)).toBe(false);
      expect(await store.create({ subnet: P('10.88.3.0/24'), ipv6Subnet: P('fd88:0:0:2::/64') }, dualAttrs(2), 60)).toBe(false);
      expect(await store.create({ ipv6Subnet: P('fd88:0:0:1::/64') }, { ...dualAttrs(2), publicIP: undefined, vni: undefined, vtepMAC: undefined }, 60)).toBe(false);
      expect(await store.create({ subnet: P('10.88.4.0/24'), ipv6Subnet: P('fd88:0:0:2::/64') }, dualAttrs(2), 60)).toBe(true);
      expect((await listed()).map((l) => `${l.subnet} ${l.ipv6}`).sort()).toEqual(['10.88.3.0/24 fd88:0:0:1::/64', '10.88.4.0/24 fd88:0:0:2::/64']);
    });

    it('a renewal without a TTL makes the lease a reservation (permanent), and the next one keeps it so', async () => {
      expect(await store.create(A, attrs(1), 60)).toBe(true);
      expect((await listed())[0].permanent).toBe(false);
      const [lease] = (await store.list()).leases;
      expect(await store.renew(A, attrs(1), 0, lease.raw)).toBe(true);
      expect(await listed()).toEqual([{ subnet: '10.88.3.0/24', ipv6: undefined, ip: '192.168.88.1', permanent: true }]);
      const [reservation] = (await store.list()).leases;
      expect(await store.renew(A, attrs(1), 0, reservation.raw)).toBe(true);
      expect((await listed())[0].permanent).toBe(true);
    });

    it('create without a TTL writes a reservation (permanent), as flannel keeps them', async () => {
      expect(await store.create(A, attrs(1), 0)).toBe(true);
      expect(await listed()).toEqual([{ subnet: '10.88.3.0/24', ipv6: undefined, ip: '192.168.88.1', permanent: true }]);
    });

    it('renew is guarded by the value last seen: another node\'s data there now makes it fail and stay', async () => {
      expect(await store.create(A, attrs(1), 60)).toBe(true);
      const [mine] = (await store.list()).leases;
      expect(await store.renew(A, attrs(1), 120, encodeAttrs(attrs(2)))).toBe(false);
      expect(await store.renew(A, attrs(1), 120, mine.raw)).toBe(true);
      // another node takes the key over; our renewal, still expecting our value, must not overwrite it
      const [renewed] = (await store.list()).leases;
      expect(await store.renew(A, attrs(9), 60, renewed.raw)).toBe(true);
      expect(await store.renew(A, attrs(1), 60, renewed.raw)).toBe(false);
      expect((await listed())[0].ip).toBe('192.168.88.9');
    });

    it('remove: the lease is gone and its subnet free again; removing what is gone is no error', async () => {
      expect(await store.create(A, attrs(1), 60)).toBe(true);
      expect(await store.create(B, attrs(2), 60)).toBe(true);
      await store.remove(A);
      expect((await listed()).map((l) => l.subnet)).toEqual(['10.88.4.0/24']);
      await store.remove(A);
      expect(await store.create(A, attrs(3), 60)).toBe(true);
    });

    it('watch: a lease added, changed or removed is reported, without errors', async () => {
      const w = watching(store);
      try {
        await store.create(A, attrs(1), 60);
        await waitFor('the watch to report the new lease', () => w.changes.length > 0 || w.errors.length > 0, watchTimeoutMs);
        expect(w.errors).toEqual([]);
        const seen = w.changes.length;
        await store.remove(A);
        await waitFor('the watch to report the removal', () => w.changes.length > seen || w.errors.length > 0, watchTimeoutMs);
        expect(w.errors).toEqual([]);
      } finally {
        w.stop();
      }
    });

    it('watch from a list\'s revision: a change made between the list and the watch is reported', async () => {
      await store.create(A, attrs(1), 60);
      const { revision } = await store.list();
      expect(revision).toBeDefined();
      await store.create(B, attrs(2), 60); // after the list, before the watch
      const w = watching(store, revision);
      try {
        await waitFor('the watch to report the change it started after', () => w.changes.length > 0 || w.errors.length > 0, watchTimeoutMs);
        expect(w.errors).toEqual([]);
      } finally {
        w.stop();
      }
    });
  });
}
