import { describe, expect, it } from 'vitest';
import { allocate } from '../../src/ipam/allocator';
import type { ReservationStore } from '../../src/ipam/reservation-store';
import { IP } from '../../src/net/ip';
import { Owner, ownerEquals } from '../../src/ipam/owner';
import { loadIpamConfig } from '../../src/ipam/config';
import { parseNetConf } from '../../src/cni/config';
import { parseCniArgs } from '../../src/cni/args';
import { CniError } from '../../src/cni/errors';

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
const a: Owner = { containerId: 'a', ifname: 'eth0' };
const b: Owner = { containerId: 'b', ifname: 'eth0' };

describe('allocate', () => {
  it('goes round-robin from the last reservation and records it', () => {
    const store = new FakeStore();
    const s = sets([[{ subnet: '10.0.0.0/29' }]]);
    expect(allocate(store, s, new Map(), a, [])[0].ip.toString()).toBe('10.0.0.2');
    store.release(IP.parse('10.0.0.2')!);
    expect(allocate(store, s, new Map(), b, [])[0].ip.toString()).toBe('10.0.0.3'); // not reusing .2 at once
    expect(store.last.get(0)!.toString()).toBe('10.0.0.3');
  });

  it('returns what the attachment already holds (idempotent ADD)', () => {
    const store = new FakeStore();
    const s = sets([[{ subnet: '10.0.0.0/29' }]]);
    const first = allocate(store, s, new Map(), a, []);
    const again = allocate(store, s, new Map(), a, [first[0].ip]);
    expect(again[0].ip.equals(first[0].ip)).toBe(true);
    expect(again[0].fresh).toBe(false);
    expect(store.held.size).toBe(1);
  });

  it('names the owner of a requested address that is taken', () => {
    const store = new FakeStore();
    const s = sets([[{ subnet: '10.0.0.0/29' }]]);
    allocate(store, s, new Map([[0, IP.parse('10.0.0.4')!]]), a, []);
    expect(() => allocate(store, s, new Map([[0, IP.parse('10.0.0.4')!]]), b, [])).toThrow(/10.0.0.4 is already reserved by container a \(eth0\)/);
  });

  it('rolls back the other range sets when one is exhausted, naming the ranges', () => {
    const store = new FakeStore();
    const s = sets([[{ subnet: '10.0.0.0/29' }], [{ subnet: '10.1.0.0/30' }]]); // the /30 has one usable address
    allocate(store, s, new Map(), a, []);
    let err: unknown;
    try {
      allocate(store, s, new Map(), b, []);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(CniError);
    expect((err as Error).message).toMatch(/no IP addresses available in range set 10.1.0.1-10.1.0.2/);
    expect([...store.held.values()].every((o) => ownerEquals(o, a))).toBe(true);
  });
});
