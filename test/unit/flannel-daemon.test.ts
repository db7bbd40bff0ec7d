// The daemon and lease acquisition against an in-memory store with etcd's
// semantics (revisions, values compared byte for byte, keys with or without
// an etcd lease, a watch that can start at a revision) and, for the daemon, a
// small model of the node's `ip`/`bridge` (links, neighbours, FDB, routes)
// installed with setRunner. Nothing here touches the machine.
import { beforeEach, describe, expect, it } from 'vitest';
import { IP } from '../../src/net/ip';
import { acquireLease } from '../../src/flannel/acquire';
import { parseNetworkConfig } from '../../src/flannel/netconfig';
import { LeaseAttrs, LeaseSubnets, decodeAttrs, encodeAttrs, leaseKey, parseLeaseKey, taken } from '../../src/flannel/lease';
import { LeaseStore, ListResult, StoreUnavailable } from '../../src/flannel/store';

interface Entry {
  raw: string;
  /** The etcd lease the key hangs on; 0 = none (a flannel reservation). */
  lease: number;
  expiresAt?: number;
  modRevision: number;
}

/** An in-memory LeaseStore that behaves as our etcd store does against etcd. */
class MemStore implements LeaseStore {
  readonly description = 'mem store';
  config?: string = '{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan"}}';
  readonly entries = new Map<string, Entry>();
  revision = 1;
  private nextLease = 100;
  readonly history: { rev: number; key: string }[] = [];
  private readonly watchers = new Set<(why: string) => void>();
  /** Every call, for assertions: "list", "renew 10.88.1.0-24 ttl=60", ... */
  readonly calls: string[] = [];
  /** While true every call fails as an unreachable etcd does. */
  down = false;
  /** Runs after a list has read the entries, before it returns (a change "between list and watch"). */
  afterList?: () => void;

  private check(what: string): void {
    this.calls.push(what);
    if (this.down) throw new StoreUnavailable('etcd mem unreachable: connection refused');
  }

  /** Writes a key as another node (or etcdctl) would; ttlS 0 = no etcd lease. */
  put(key: string, raw: string, ttlS = 0): void {
    this.revision++;
    this.entries.set(key, {
      raw,
      lease: ttlS ? this.nextLease++ : 0,
      ...(ttlS ? { expiresAt: Date.now() + ttlS * 1000 } : {}),
      modRevision: this.revision,
    });
    this.history.push({ rev: this.revision, key });
    for (const w of this.watchers) w(`put ${key}`);
  }

  del(key: string): void {
    if (!this.entries.delete(key)) return;
    this.revision++;
    this.history.push({ rev: this.revision, key });
    for (const w of this.watchers) w(`delete ${key}`);
  }

  async getConfig(): Promise<string | undefined> {
    this.check('getConfig');
    return this.config;
  }

  async setConfig(text: string): Promise<void> {
    this.config = text;
  }

  async list(): Promise<ListResult> {
    this.check('list');
    const out: ListResult = { leases: [], bad: [] };
    for (const [key, e] of this.entries) {
      if (e.expiresAt !== undefined && e.expiresAt <= Date.now()) continue;
      const subnets = parseLeaseKey(key);
      if (!subnets) {
        out.bad.push({ key, why: 'not a subnet key' });
        continue;
      }
      try {
        out.leases.push({ ...subnets, attrs: decodeAttrs(e.raw), raw: e.raw, ...(e.lease === 0 ? { permanent: true } : {}) });
      } catch (err) {
        out.bad.push({ key, why: (err as Error).message });
      }
    }
    this.afterList?.();
    return out;
  }

  async create(subnets: LeaseSubnets, attrs: LeaseAttrs, ttlS: number): Promise<boolean> {
    this.check(`create ${leaseKey(subnets)} ttl=${ttlS}`);
    const { leases } = await this.list();
    if (this.entries.has(leaseKey(subnets)) || [subnets.subnet, subnets.ipv6Subnet].some((s) => s && taken(s, leases))) return false;
    this.put(leaseKey(subnets), encodeAttrs(attrs), ttlS);
    return true;
  }

  async renew(subnets: LeaseSubnets, attrs: LeaseAttrs, ttlS: number, expectedValue?: string): Promise<boolean> {
    this.check(`renew ${leaseKey(subnets)} ttl=${ttlS}`);
    const e = this.entries.get(leaseKey(subnets));
    if (!e || (expectedValue !== undefined && e.raw !== expectedValue)) return false; // etcd: Value == expected
    this.put(leaseKey(subnets), encodeAttrs(attrs), ttlS);
    return true;
  }

  async remove(subnets: LeaseSubnets): Promise<void> {
    this.check(`remove ${leaseKey(subnets)}`);
    this.del(leaseKey(subnets));
  }

  watch(onChange: (why: string) => void): () => void {
    this.watchers.add(onChange);
    return () => this.watchers.delete(onChange);
  }

  async close(): Promise<void> {}
}

const attrsOf = (n: number): LeaseAttrs => ({ publicIP: IP.parse(`192.168.88.${n}`)!, backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:00:00:0${n}` });

describe('acquiring a lease against etcd semantics', () => {
  const cfg = parseNetworkConfig('{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan"}}');
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

