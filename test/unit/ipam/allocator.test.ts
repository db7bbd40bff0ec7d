import { describe, expect, it } from 'vitest';
import { allocate, AllocationRequest, ParkedAddresses } from '../../../src/ipam/allocator';
import type { ReservationStore } from '../../../src/ipam/reservation-store';
import { IP } from '../../../src/net/ip';
import { Owner, ownerEquals } from '../../../src/ipam/owner';
import { loadIpamConfig } from '../../../src/ipam/config';
import { parseNetConf } from '../../../src/cni/config';
import { parseCniArgs } from '../../../src/cni/args';
import { CniError } from '../../../src/cni/errors';
import type { RangeSet } from '../../../src/ipam/range';
import { thrown } from '../../support/expect';

/** An in-memory store that behaves like the disk one. */
class FakeStore implements ReservationStore {
  held = new Map<string, Owner>();
  last = new Map<number, IP>();
  ownerOf = (ip: IP) => this.held.get(ip.toString());
  reserve(ip: IP, owner: Owner) {
    if (this.held.has(ip.toString())) return false;
    this.held.set(ip.toString(), owner);
    return true;
  }
  release = (ip: IP) => void this.held.delete(ip.toString());
  lastReserved = (i: number) => this.last.get(i);
  setLastReserved = (i: number, ip: IP) => void this.last.set(i, ip);
}

const sets = (ranges: object[][]) =>
  loadIpamConfig(parseNetConf(JSON.stringify({ cniVersion: '1.0.0', name: 'n', ipam: { ranges } })), parseCniArgs('')).rangeSets;
const ip = (s: string) => IP.parse(s)!;
const NOTHING_PARKED: ParkedAddresses = { mine: [], holderOf: () => undefined, oldestIn: () => [] };
const a: Owner = { containerId: 'a', ifname: 'eth0' };
const b: Owner = { containerId: 'b', ifname: 'eth0' };
const req = (s: RangeSet[], owner: Owner, more: Partial<AllocationRequest> = {}): AllocationRequest => ({
  owner,
  sets: s,
  requested: new Map(),
  held: [],
  parked: NOTHING_PARKED,
  ...more,
});
const addresses = (xs: { ip: IP }[]) => xs.map((x) => x.ip.toString());


describe('allocate', () => {
  it('goes round-robin from the last reservation and records it', () => {
    const store = new FakeStore();
    const s = sets([[{ subnet: '10.0.0.0/29' }]]);
    expect(addresses(allocate(store, req(s, a)))).toEqual(['10.0.0.2']);
    store.release(ip('10.0.0.2'));
    expect(addresses(allocate(store, req(s, b)))).toEqual(['10.0.0.3']); // not reusing .2 at once
    expect(store.last.get(0)!.toString()).toBe('10.0.0.3');
  });

  it('returns what the attachment already holds (idempotent ADD)', () => {
    const store = new FakeStore();
    const s = sets([[{ subnet: '10.0.0.0/29' }]]);
    const first = allocate(store, req(s, a));
    const again = allocate(store, req(s, a, { held: [first[0].ip] }));
    expect(again[0].ip.equals(first[0].ip)).toBe(true);
    expect(again[0].fresh).toBe(false);
    expect(store.held.size).toBe(1);
  });

  it('names the owner of a requested address that is taken (code 11)', () => {
    const store = new FakeStore();
    const s = sets([[{ subnet: '10.0.0.0/29' }]]);
    allocate(store, req(s, a, { requested: new Map([[0, ip('10.0.0.4')]]) }));
    const err = thrown(CniError, () => allocate(store, req(s, b, { requested: new Map([[0, ip('10.0.0.4')]]) })));
    expect(err.code).toBe(11);
    expect(err.message).toMatch(/10.0.0.4 is already reserved by container a \(eth0\)/);
  });

  it('rolls back the other range sets when one is exhausted (code 50), naming the ranges', () => {
    const store = new FakeStore();
    const s = sets([[{ subnet: '10.0.0.0/29' }], [{ subnet: '10.1.0.0/30' }]]); // the /30 has one usable address
    allocate(store, req(s, a));
    const err = thrown(CniError, () => allocate(store, req(s, b)));
    expect(err.code).toBe(50);
    expect(err.message).toBe('no IP addresses available in range set 10.1.0.1-10.1.0.2');
    expect([...store.held.values()].every((o) => ownerEquals(o, a))).toBe(true);
  });
});

describe('allocate with parked addresses', () => {
  const s = sets([[{ subnet: '10.0.0.0/29' }], [{ subnet: 'fd00::/125' }]]);
  const parkedBy = (store: FakeStore, owner: Owner, ...ips: string[]) => ips.forEach((x) => store.reserve(ip(x), owner));

  it('gives the pod its own parked addresses back, in every range set', () => {
    const store = new FakeStore();
    const old: Owner = { containerId: 'old', ifname: 'eth0' };
    parkedBy(store, old, '10.0.0.5', 'fd00::5');
    const parked: ParkedAddresses = { ...NOTHING_PARKED, mine: [ip('10.0.0.5'), ip('fd00::5')] };
    const got = allocate(store, req(s, a, { parked }));
    expect(addresses(got)).toEqual(['10.0.0.5', 'fd00::5']);
    expect(got.every((x) => x.unparked)).toBe(true);
    expect(ownerEquals(store.ownerOf(ip('10.0.0.5'))!, a)).toBe(true);
  });

  it('takes another pod\'s parked address only when nothing else is free, the oldest first', () => {
    const store = new FakeStore();
    const one = sets([[{ subnet: '10.0.0.0/29' }]]); // .2 to .6
    const old: Owner = { containerId: 'old', ifname: 'eth0' };
    parkedBy(store, old, '10.0.0.3', '10.0.0.4');
    const parked: ParkedAddresses = { ...NOTHING_PARKED, oldestIn: () => [ip('10.0.0.4'), ip('10.0.0.3')] };
    const free = allocate(store, req(one, a, { parked }));
    expect(addresses(free)).toEqual(['10.0.0.2']);
    expect(free[0].unparked).toBeUndefined();
    for (const id of ['c', 'd']) allocate(store, req(one, { containerId: id, ifname: 'eth0' }, { parked })); // .5, .6
    const taken = allocate(store, req(one, b, { parked }));
    expect(addresses(taken)).toEqual(['10.0.0.4']);
    expect(taken[0].unparked).toBe(true);
  });

  it('refuses a requested address parked for another pod, naming the pod and when the parking ends (code 11)', () => {
    const store = new FakeStore();
    parkedBy(store, { containerId: 'old', ifname: 'eth0' }, '10.0.0.5');
    const until = Date.parse('2030-01-02T03:04:05Z');
    const parked: ParkedAddresses = { ...NOTHING_PARKED, holderOf: (x) => (x.equals(ip('10.0.0.5')) ? { pod: 'ns/web-0', until } : undefined) };
    const err = thrown(CniError, () => allocate(store, req(s, a, { requested: new Map([[0, ip('10.0.0.5')]]), parked })));
    expect(err.code).toBe(11);
    expect(err.message).toBe('requested IP 10.0.0.5 is parked for pod ns/web-0 until 2030-01-02T03:04:05.000Z (range set 10.0.0.1-10.0.0.6)');
  });

  it('a failed ADD gives a reclaimed address back up (free again for the pod to reclaim)', () => {
    const store = new FakeStore();
    const tight = sets([[{ subnet: '10.0.0.0/29' }], [{ subnet: '10.1.0.0/30' }]]);
    store.reserve(ip('10.1.0.2'), b); // the second set is full
    parkedBy(store, { containerId: 'old', ifname: 'eth0' }, '10.0.0.5');
    const parked: ParkedAddresses = { ...NOTHING_PARKED, mine: [ip('10.0.0.5')] };
    expect(thrown(CniError, () => allocate(store, req(tight, a, { parked }))).code).toBe(50);
    expect(store.ownerOf(ip('10.0.0.5'))).toBeUndefined();
  });
});
