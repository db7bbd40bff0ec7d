// The embedded lease store: a directory that several daemons on one machine
// (or node namespaces sharing a filesystem) use instead of etcd.
//
//   <dir>/config                 the network config, the same JSON as <prefix>/config in etcd
//   <dir>/subnets/10.88.1.0-24   a lease: flannel's lease JSON plus "Expiration" (RFC 3339),
//                                like flannel's own Lease type; none means it never expires.
//                                Named as flannel's etcd keys: 10.88.1.0-24&fd88:0:0:1::-64
//                                (dual stack), fd88:0:0:1::-64 (IPv6 only)
//   <dir>/.lock                  flock(2) lock file (util/lock), held for every change
//
// Every change happens under the lock and is written atomically; readers need
// no lock (they see whole files). Watching is a short poll of the directory.
import * as fs from 'node:fs';
import { join } from 'node:path';
import { withLock } from '../../util/lock';
import { ensureDir, readIfExists, removeFile, writeFileAtomic } from '../../util/fs';
import { Lease, LeaseAttrs, LeaseSubnets, decodeAttrs, encodeAttrs, leaseKey, parseLeaseKey, sameAttrs, taken } from '../lease';
import type { LeaseStore } from './store';
import type { LeaseList } from '../manager';

const LOCK_TIMEOUT_MS = 15_000;
const POLL_MS = 300;

export class FileStore implements LeaseStore {
  readonly description: string;
  private readonly subnetsDir: string;
  /**
   * Each lease file as last read, by name, with the stat it was read at:
   * a poll or a list stats every file but reads and parses only those that
   * changed (every write is a rename: a new inode). Thousands of leases polled
   * every 300 ms would otherwise be read in full each time.
   */
  private readonly parsed = new Map<string, { stamp: string; read: ReturnType<FileStore['readLease']> }>();

  constructor(readonly dir: string) {
    this.description = `file store ${dir}`;
    this.subnetsDir = join(dir, 'subnets');
  }

  private async locked<T>(fn: () => Promise<T> | T): Promise<T> {
    ensureDir(this.subnetsDir, 0o755);
    return withLock(join(this.dir, '.lock'), LOCK_TIMEOUT_MS, async () => fn());
  }

  async getConfig(): Promise<string | undefined> {
    return readIfExists(join(this.dir, 'config'));
  }

  async setConfig(text: string): Promise<void> {
    await this.locked(() => writeFileAtomic(join(this.dir, 'config'), text, { mode: 0o644, durable: true }));
  }

  private readLease(name: string): { lease?: Lease; raw?: string; why?: string } {
    const subnets = parseLeaseKey(name);
    if (!subnets) return { why: 'the file name is not a subnet key like 10.244.1.0-24 or 10.244.1.0-24&fd00:10:244:1::-64' };
    const raw = readIfExists(join(this.subnetsDir, name));
    if (raw === undefined) return {};
    try {
      const attrs = decodeAttrs(raw);
      const exp = (JSON.parse(raw) as { Expiration?: unknown }).Expiration;
      let expiration: number | undefined;
      if (typeof exp === 'string' && exp !== '' && !exp.startsWith('0001-01-01')) {
        expiration = Date.parse(exp);
        if (Number.isNaN(expiration)) return { why: `"Expiration" ${JSON.stringify(exp)} is not a time` };
      }
      // no expiry: a reservation (or a lease written by hand), kept without one
      return { lease: { ...subnets, attrs, ...(expiration !== undefined ? { expiration } : { permanent: true }), raw }, raw };
    } catch (err) {
      return { why: (err as Error).message };
    }
  }

  /** A lease file as readLease reads it, from the cache while its stat is unchanged; undefined when it is gone. */
  private readCached(name: string): { read: ReturnType<FileStore['readLease']>; stamp: string } | undefined {
    let st: fs.Stats;
    try {
      st = fs.statSync(join(this.subnetsDir, name));
    } catch {
      this.parsed.delete(name);
      return undefined; // removed between readdir and stat: the next poll sees it
    }
    const stamp = `${st.size}:${st.mtimeMs}:${st.ino}`;
    const hit = this.parsed.get(name);
    if (hit?.stamp === stamp) return hit;
    const entry = { stamp, read: this.readLease(name) };
    this.parsed.set(name, entry);
    return entry;
  }

  private names(): string[] {
    try {
      return fs.readdirSync(this.subnetsDir).filter((n) => !n.startsWith('.'));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
  }

  async list(): Promise<LeaseList> {
    // the directory's signature before reading it: a change made while (or after) it is read shows in the next poll
    const revision = this.signature();
    const now = Date.now();
    const out: LeaseList = { leases: [], bad: [], revision };
    const names = this.names();
    if (this.parsed.size > names.length) {
      const present = new Set(names);
      for (const n of [...this.parsed.keys()]) if (!present.has(n)) this.parsed.delete(n);
    }
    for (const name of names) {
      const { lease, why } = this.readCached(name)?.read ?? {};
      if (why) out.bad.push({ key: name, why });
      else if (lease && (lease.expiration === undefined || lease.expiration > now)) out.leases.push(lease);
    }
    return out;
  }

  /** The file: the lease JSON plus "Expiration", none for `ttlS` 0 (a reservation). */
  private encode(attrs: LeaseAttrs, ttlS: number): string {
    if (ttlS === 0) return encodeAttrs(attrs);
    const obj = JSON.parse(encodeAttrs(attrs)) as Record<string, unknown>;
    obj.Expiration = new Date(Date.now() + ttlS * 1000).toISOString();
    return JSON.stringify(obj);
  }

  async create(subnets: LeaseSubnets, attrs: LeaseAttrs, ttlS: number): Promise<boolean> {
    return this.locked(async () => {
      const { lease } = this.readLease(leaseKey(subnets));
      const file = join(this.subnetsDir, leaseKey(subnets));
      if (fs.existsSync(file) && !(lease?.expiration !== undefined && lease.expiration <= Date.now())) return false;
      // another key holding one of our subnets (the other family's half differs, or another length)
      const { leases } = await this.list();
      if ([subnets.subnet, subnets.ipv6Subnet].some((s) => s && taken(s, leases))) return false;
      writeFileAtomic(file, this.encode(attrs, ttlS), { mode: 0o644, durable: true });
      return true;
    });
  }

  async renew(subnets: LeaseSubnets, attrs: LeaseAttrs, ttlS: number, expectedValue?: string): Promise<boolean> {
    return this.locked(() => {
      const { lease, raw } = this.readLease(leaseKey(subnets));
      const live = lease && (lease.expiration === undefined || lease.expiration > Date.now());
      if (live && expectedValue !== undefined && !sameAttrs(raw!, expectedValue)) return false;
      writeFileAtomic(join(this.subnetsDir, leaseKey(subnets)), this.encode(attrs, ttlS), { mode: 0o644, durable: true });
      return true;
    });
  }

  async remove(subnets: LeaseSubnets): Promise<void> {
    await this.locked(() => removeFile(join(this.subnetsDir, leaseKey(subnets))));
  }

  async expire(): Promise<void> {
    const now = Date.now();
    const stale = this.names().filter((n) => {
      const { lease } = this.readLease(n);
      return lease?.expiration !== undefined && lease.expiration <= now;
    });
    if (stale.length === 0) return;
    await this.locked(() => {
      for (const n of stale) {
        const { lease } = this.readLease(n); // re-read under the lock: it may have been renewed
        if (lease?.expiration !== undefined && lease.expiration <= Date.now()) removeFile(join(this.subnetsDir, n));
      }
    });
  }

  /** A signature of the directory: names, sizes and mtimes, plus which leases have expired by now. */
  private signature(): string {
    const now = Date.now();
    const parts: string[] = [];
    for (const name of this.names().sort()) {
      const cached = this.readCached(name);
      if (!cached) continue;
      const lease = cached.read.lease;
      const expired = lease?.expiration !== undefined && lease.expiration <= now;
      parts.push(`${name}:${cached.stamp}:${expired}`);
    }
    return parts.join('\n');
  }

  /** `after`: a list's revision (its signature), so a change made since that list shows in the first poll. */
  watch(onChange: (why: string) => void, onError: (err: Error) => void, after?: string): () => void {
    let last = after ?? '';
    if (after === undefined) {
      try {
        last = this.signature();
      } catch (err) {
        onError(err as Error);
      }
    }
    const timer = setInterval(() => {
      try {
        const now = this.signature();
        if (now !== last) {
          last = now;
          onChange('lease directory changed');
        }
      } catch (err) {
        onError(err as Error);
      }
    }, POLL_MS);
    return () => clearInterval(timer);
  }

  async close(): Promise<void> {}
}
