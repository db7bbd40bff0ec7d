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
// no lock (they see whole files). Watching is inotify on subnets/ (a change
// costs the file it touched, whatever the number of leases), checked by a
// stat of the directory every 300 ms and a stat of every file every 10 s, for
// the notifications inotify can lose (see Notifier).
import { join } from 'node:path';
import { withLock } from '../../util/lock';
import { ensureDir, removeFile, writeFileAtomic } from '../../util/fs';
import { utcIso } from '../../util/utc-time';
import { LeaseAttrs, LeaseSubnets, encodeAttrs, leaseKey, parseLeaseKey, sameAttrs, taken } from '../lease';
import type { LeaseStore } from './store';
import type { LeaseList } from '../manager';
import { FileIo, LeaseFiles, isLeaseName, parseLeaseFile, realIo } from './lease-files';

const LOCK_TIMEOUT_MS = 15_000;
/** How often a watch stats the directory itself: a file added, replaced or removed without a notification. */
const CHECK_MS = 300;
/**
 * How often a watch stats every lease file: one edited in place whose notification was lost (the
 * directory does not move then). 5,000 stats cost 30-80 ms of CPU: every 10 s that was most of an
 * idle daemon's CPU (~1% of a core), for a case that needs two rarities at once.
 */
const RESCAN_MS = 30_000;

export interface FileStoreOptions {
  checkMs?: number;
  rescanMs?: number;
  /** Tests: the file-system calls (counting them, losing notifications). */
  io?: Partial<FileIo>;
}

let instances = 0;

export class FileStore implements LeaseStore {
  readonly description: string;
  private readonly subnetsDir: string;
  private readonly io: FileIo;
  private readonly files: LeaseFiles;
  /** Names this instance's revisions, so a revision from another instance is never taken for one of ours. */
  private readonly id = `${process.pid}.${++instances}`;
  /** inotify on subnets/ while any watch runs: lists then re-read only what it named. */
  private notifier?: Notifier;

  constructor(
    readonly dir: string,
    private readonly opts: FileStoreOptions = {},
  ) {
    this.description = `file store ${dir}`;
    this.subnetsDir = join(dir, 'subnets');
    this.io = { ...realIo, ...opts.io };
    this.files = new LeaseFiles(this.subnetsDir, this.io);
  }

  private async locked<T>(fn: () => Promise<T> | T): Promise<T> {
    ensureDir(this.subnetsDir, 0o755);
    return withLock(join(this.dir, '.lock'), LOCK_TIMEOUT_MS, async () => fn());
  }

  async getConfig(): Promise<string | undefined> {
    return this.io.readFile(join(this.dir, 'config'));
  }

  async setConfig(text: string): Promise<void> {
    await this.locked(() => writeFileAtomic(join(this.dir, 'config'), text, { mode: 0o644, durable: true }));
  }

  /** A lease file read now, past the picture (under the lock, before a change). */
  private readNow(name: string) {
    return parseLeaseFile(name, this.io.readFile(join(this.subnetsDir, name)));
  }

  /**
   * The picture brought up to date: with a working notifier, the files it
   * named since (and a scan when it asked for one); without, a scan (a stat
   * of every file). Either way only changed files are read.
   */
  private current(): void {
    if (!this.notifier?.trusted()) this.files.scan();
    this.files.refresh();
  }

  async list(): Promise<LeaseList> {
    const now = Date.now();
    this.current();
    // the picture's generation: a change after this list shows as a difference from it (watch())
    const out: LeaseList = { leases: [], bad: [], revision: `${this.id}:${this.files.generation}:${now}` };
    for (const [name, { read }] of this.files.entries()) {
      const { lease, why } = read;
      if (why) out.bad.push({ key: name, why });
      else if (lease && (lease.expiration === undefined || lease.expiration > now)) out.leases.push(lease);
    }
    return out;
  }

  /** The file: the lease JSON plus "Expiration", none for `ttlS` 0 (a reservation). */
  private encode(attrs: LeaseAttrs, ttlS: number): string {
    if (ttlS === 0) return encodeAttrs(attrs);
    const obj = JSON.parse(encodeAttrs(attrs)) as Record<string, unknown>;
    obj.Expiration = utcIso(Date.now() + ttlS * 1000);
    return JSON.stringify(obj);
  }

  private write(name: string, text: string): void {
    writeFileAtomic(join(this.subnetsDir, name), text, { mode: 0o644, durable: true });
    this.files.mark(name);
  }

  async create(subnets: LeaseSubnets, attrs: LeaseAttrs, ttlS: number): Promise<boolean> {
    return this.locked(async () => {
      const key = leaseKey(subnets);
      const live = (r: ReturnType<FileStore['readNow']>) => !(r.lease?.expiration !== undefined && r.lease.expiration <= Date.now());
      const same = this.readNow(key);
      if ((same.lease || same.why) && live(same)) return false;
      // Another key holding one of our subnets (the other family's half differs, or another
      // length). Read from the disk under the lock, not from the picture: a lease another
      // process wrote a moment ago may not have been notified yet. Only files whose name
      // overlaps ours are read.
      const mine = [subnets.subnet, subnets.ipv6Subnet];
      for (const name of this.io.readdir(this.subnetsDir)) {
        if (name === key || !isLeaseName(name)) continue;
        const other = parseLeaseKey(name);
        if (!other || !mine.some((s) => s && taken(s, [other]))) continue;
        const r = this.readNow(name);
        if (r.lease && live(r)) return false;
      }
      this.write(key, this.encode(attrs, ttlS));
      return true;
    });
  }

  async renew(subnets: LeaseSubnets, attrs: LeaseAttrs, ttlS: number, expectedValue?: string): Promise<boolean> {
    return this.locked(() => {
      const { lease, raw } = this.readNow(leaseKey(subnets));
      const live = lease && (lease.expiration === undefined || lease.expiration > Date.now());
      if (live && expectedValue !== undefined && !sameAttrs(raw!, expectedValue)) return false;
      this.write(leaseKey(subnets), this.encode(attrs, ttlS));
      return true;
    });
  }

  async remove(subnets: LeaseSubnets): Promise<void> {
    await this.locked(() => {
      removeFile(join(this.subnetsDir, leaseKey(subnets)));
      this.files.mark(leaseKey(subnets));
    });
  }

  async expire(): Promise<void> {
    this.current();
    const now = Date.now();
    const stale: string[] = [];
    for (const [name, { read }] of this.files.entries()) if (read.lease?.expiration !== undefined && read.lease.expiration <= now) stale.push(name);
    if (stale.length === 0) return;
    await this.locked(() => {
      for (const n of stale) {
        const { lease } = this.readNow(n); // re-read under the lock: it may have been renewed
        if (lease?.expiration !== undefined && lease.expiration <= Date.now()) {
          removeFile(join(this.subnetsDir, n));
          this.files.mark(n);
        }
      }
    });
  }

  /**
   * `after`: a list's revision: a change made since that list is reported
   * at once. Without, changes from now on.
   */
  watch(onChange: (why: string) => void, onError: (err: Error) => void, after?: string): () => void {
    const subscriber = { onChange, onError };
    try {
      ensureDir(this.subnetsDir, 0o755);
      this.notifier ??= new Notifier(this.subnetsDir, this.io, this.files, this.opts);
      // watching first, then comparing: a change made in between is notified, seen by the scan, or both
      this.notifier.subscribe(subscriber);
      if (after === undefined) {
        this.current(); // the picture as of now, silently
      } else if (this.files.scan() || this.changedSince(after)) {
        this.notifier.notify('lease directory changed since the list');
      }
    } catch (err) {
      onError(err as Error);
    }
    return () => {
      if (this.notifier?.unsubscribe(subscriber)) this.notifier = undefined;
    };
  }

  /** Whether the picture moved since the list of revision `after`, or a lease of it has expired since. */
  private changedSince(after: string): boolean {
    const [id, generation, at] = after.split(':');
    if (id !== this.id || generation !== String(this.files.generation)) return true;
    return this.files.nextExpiry(Number(at)) <= Date.now();
  }

  async close(): Promise<void> {
    this.notifier?.stop();
    this.notifier = undefined;
  }
}

type Subscriber = { onChange: (why: string) => void; onError: (err: Error) => void };

/**
 * inotify on subnets/ (fs.watch), shared by a store's watches. Each
 * notification marks the file it names in the picture and is passed on (one
 * call per turn of the event loop). inotify can lose notifications: its queue
 * overflows (Node drops the overflow event without a word), the directory is
 * replaced, a watch cannot be opened (the inotify limits). Hence two checks:
 * every 300 ms a stat of the directory itself, whose mtime moves with every
 * file added, renamed over (our atomic writes, the CNI plugin's, other
 * daemons') or removed: moved with no notification since the last check, the
 * files are scanned; every 10 s a scan of every file (a stat each), for a file
 * edited in place whose notification was lost. Without a working inotify
 * watch, the 300 ms check scans every time (the store's old poll). Leases
 * that merely expire are noticed at the 300 ms check, from the expiries read.
 */
class Notifier {
  private readonly subscribers = new Set<Subscriber>();
  private handle?: { close(): void };
  /** A notification without a name, or an inotify error: the next list scans. */
  private needScan = false;
  private events = 0;
  private eventsAtCheck = 0;
  private dirStamp?: string;
  private nextExpiry = -Infinity;
  private expiryGeneration = -1;
  private pending?: string;
  private readonly timers: NodeJS.Timeout[] = [];

  constructor(
    private readonly dir: string,
    private readonly io: FileIo,
    private readonly files: LeaseFiles,
    opts: FileStoreOptions,
  ) {
    this.open();
    this.dirStamp = this.io.stamp(dir);
    this.timers.push(setInterval(() => this.safely(() => this.check()), opts.checkMs ?? CHECK_MS));
    this.timers.push(setInterval(() => this.safely(() => this.files.scan() && this.notify('lease files changed without a notification')), opts.rescanMs ?? RESCAN_MS));
    for (const t of this.timers) t.unref?.();
  }

  /** Whether lists may rely on the notifications (then they read only what was named). */
  trusted(): boolean {
    if (!this.handle || !this.needScan) return !!this.handle;
    this.needScan = false;
    return false; // scan this once
  }

  subscribe(s: Subscriber): void {
    this.subscribers.add(s);
  }

  /** True when that was the last subscriber (then the notifier stops). */
  unsubscribe(s: Subscriber): boolean {
    this.subscribers.delete(s);
    if (this.subscribers.size > 0) return false;
    this.stop();
    return true;
  }

  stop(): void {
    for (const t of this.timers) clearInterval(t);
    this.handle?.close();
    this.handle = undefined;
  }

  /** Tells every watch, once per turn of the event loop however many notifications came. */
  notify(why: string): void {
    if (this.pending !== undefined) return;
    this.pending = why;
    setImmediate(() => {
      const reason = this.pending!;
      this.pending = undefined;
      for (const s of this.subscribers) s.onChange(reason);
    });
  }

  private open(): void {
    try {
      this.handle = this.io.watch(
        this.dir,
        (name) => {
          this.events++;
          if (name === null) {
            this.needScan = true;
            this.notify('lease directory changed');
          } else if (isLeaseName(name)) {
            this.files.mark(name);
            this.notify(`lease file ${JSON.stringify(name)} changed`);
          }
        },
        () => this.lost(),
      );
    } catch {
      this.handle = undefined; // e.g. the inotify limits: the check scans instead
    }
    this.needScan = true;
  }

  /** The inotify watch broke (or the directory was replaced): scan, and open it again at the next check. */
  private lost(): void {
    this.handle?.close();
    this.handle = undefined;
    this.needScan = true;
  }

  private check(): void {
    const stamp = this.io.stamp(this.dir);
    const inode = (s?: string) => s?.split(':')[2];
    if (inode(stamp) !== inode(this.dirStamp)) this.lost(); // replaced (or gone): the watch holds the old one
    if (!this.handle && stamp !== undefined) this.open();
    const quiet = this.events === this.eventsAtCheck;
    this.eventsAtCheck = this.events;
    const moved = stamp !== this.dirStamp;
    this.dirStamp = stamp;
    // no working watch, or the directory moved and nothing was notified: look at every file
    if (!this.handle || this.needScan || (moved && quiet)) {
      this.needScan = false; // the scan marks what changed: the next list reads just that
      if (this.files.scan()) this.notify(this.handle ? 'lease directory changed without a notification' : 'lease directory changed');
    }
    // a lease read earlier expired just now: no file changed, the leases did
    if (this.expiryGeneration !== this.files.generation) {
      this.expiryGeneration = this.files.generation;
      this.nextExpiry = this.files.nextExpiry(Date.now());
    }
    if (this.nextExpiry <= Date.now()) {
      this.nextExpiry = this.files.nextExpiry(Date.now());
      this.notify('a lease expired');
    }
  }

  private safely(fn: () => unknown): void {
    try {
      fn();
    } catch (err) {
      for (const s of this.subscribers) s.onError(err as Error);
    }
  }
}
