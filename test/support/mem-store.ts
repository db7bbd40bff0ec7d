// An in-memory LeaseStore with etcd's semantics, for the daemon's and the
// lease keeper's unit tests: revisions, values compared byte for byte, keys
// with or without an etcd lease (a flannel reservation), a watch that can
// start at a revision, and knobs to make it slow, down or change under a call.
import { decodeAttrs, encodeAttrs, leaseKey, parseLeaseKey, taken, Lease, LeaseAttrs, LeaseSubnets } from '../../src/flannel/lease';
import { LeaseList, StoreUnavailable } from '../../src/flannel/manager';
import type { LeaseStore } from '../../src/flannel/store/store';

interface Entry {
  raw: string;
  /** The etcd lease the key hangs on; 0 = none (a flannel reservation). */
  lease: number;
  expiresAt?: number;
  modRevision: number;
}

/** An in-memory LeaseStore that behaves as our etcd store does against etcd. */
export class MemStore implements LeaseStore {
  readonly description = 'mem store';
  config?: string = '{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan"}}';
  readonly entries = new Map<string, Entry>();
  revision = 1;
  private nextLease = 100;
  readonly history: { rev: number; key: string }[] = [];
  private readonly watchers = new Set<(why: string) => void>();
  private readonly errorSinks = new Set<(err: Error) => void>();
  /** Every call, for assertions: "list", "renew 10.88.1.0-24 ttl=60", ... */
  readonly calls: string[] = [];
  /** While true every call fails as an unreachable etcd does. */
  down = false;
  /** Runs after a list has read the entries, before it returns (a change "between list and watch"). */
  afterList?: () => void;
  /** Runs when watch() is called, before it registers: a change made just before the watch starts. */
  beforeWatch?: () => void;
  /** Runs after each call that succeeded, with its text ("renew 10.88.1.0-24 ttl=60"). */
  after?: (call: string) => void;
  /** How long a renewal, a creation takes (a slow etcd). */
  renewDelayMs = 0;
  createDelayMs = 0;
  /** Renewals in flight right now, and the most there ever were at once. */
  private renewing = 0;
  maxConcurrentRenewals = 0;

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

  /** Decoded leases by key, reused while the entry is the same: the real stores hand out one object per unchanged lease. */
  private readonly decodedLeases = new Map<string, { entry: Entry; lease: Lease }>();

  private decoded(key: string, entry: Entry, subnets: LeaseSubnets): Lease {
    const known = this.decodedLeases.get(key);
    if (known?.entry === entry) return known.lease;
    const lease: Lease = { ...subnets, attrs: decodeAttrs(entry.raw), raw: entry.raw, ...(entry.lease === 0 ? { permanent: true } : {}) };
    this.decodedLeases.set(key, { entry, lease });
    return lease;
  }

  async list(): Promise<LeaseList> {
    this.check('list');
    const out: LeaseList = { leases: [], bad: [], revision: String(this.revision) };
    for (const [key, e] of this.entries) {
      if (e.expiresAt !== undefined && e.expiresAt <= Date.now()) continue;
      const subnets = parseLeaseKey(key);
      if (!subnets) {
        out.bad.push({ key, why: 'not a subnet key' });
        continue;
      }
      try {
        out.leases.push(this.decoded(key, e, subnets));
      } catch (err) {
        out.bad.push({ key, why: (err as Error).message });
      }
    }
    this.afterList?.();
    return out;
  }

  async create(subnets: LeaseSubnets, attrs: LeaseAttrs, ttlS: number, chosenFrom?: LeaseList): Promise<boolean> {
    this.check(`create ${leaseKey(subnets)} ttl=${ttlS}`);
    if (this.createDelayMs) await new Promise((r) => setTimeout(r, this.createDelayMs));
    // as etcd: checked against the list the subnets were chosen from, and refused when any key was written since
    if (chosenFrom?.revision !== undefined && [...this.entries.values()].some((e) => e.modRevision > Number(chosenFrom.revision))) return false;
    const { leases } = chosenFrom ?? (await this.list());
    if (this.entries.has(leaseKey(subnets)) || [subnets.subnet, subnets.ipv6Subnet].some((s) => s && taken(s, leases))) return false;
    this.put(leaseKey(subnets), encodeAttrs(attrs), ttlS);
    this.after?.(`create ${leaseKey(subnets)} ttl=${ttlS}`);
    return true;
  }

  async renew(subnets: LeaseSubnets, attrs: LeaseAttrs, ttlS: number, expectedValue?: string): Promise<boolean> {
    this.check(`renew ${leaseKey(subnets)} ttl=${ttlS}`);
    this.maxConcurrentRenewals = Math.max(this.maxConcurrentRenewals, ++this.renewing);
    try {
      if (this.renewDelayMs) await new Promise((r) => setTimeout(r, this.renewDelayMs));
    } finally {
      this.renewing--;
    }
    const e = this.entries.get(leaseKey(subnets));
    if (!e || (expectedValue !== undefined && e.raw !== expectedValue)) return false; // etcd: Value == expected
    this.put(leaseKey(subnets), encodeAttrs(attrs), ttlS);
    this.after?.(this.calls.at(-1)!);
    return true;
  }

  async remove(subnets: LeaseSubnets): Promise<void> {
    this.check(`remove ${leaseKey(subnets)}`);
    this.del(leaseKey(subnets));
  }

  /** The watch reports trouble (etcd3's 'disconnected', a failed reconnect). */
  watchError(err: Error): void {
    for (const sink of this.errorSinks) sink(err);
  }

  /** As etcd: from `after` + 1 when given (history replayed), else from now. */
  watch(onChange: (why: string) => void, onError: (err: Error) => void, after?: string): () => void {
    this.beforeWatch?.();
    this.watchers.add(onChange);
    this.errorSinks.add(onError);
    if (after !== undefined) {
      const missed = this.history.filter((h) => h.rev > Number(after));
      if (missed.length) setTimeout(() => missed.forEach((h) => onChange(`replayed ${h.key}`)), 0);
    }
    return () => this.watchers.delete(onChange);
  }

  async close(): Promise<void> {}
}
