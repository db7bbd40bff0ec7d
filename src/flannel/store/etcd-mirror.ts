// The leases as etcd last told the etcd store (etcd-store.ts): a range read
// of <prefix>/subnets/, then the watch's events applied in order, so that a
// list while the watch runs is answered from memory and a change costs the
// keys it touched, not a read of every lease. Answered from memory only
// while that is exactly etcd's state at some revision with nothing missed
// since: the watch delivering every change after that revision, our own
// writes seen come back, and a range read at least every 10 s all the same
// (a bug or a lost event cannot last). Anything else makes the next list a
// range read: no watch, a watch that broke or was made again, before the
// first read.
//
// It also tells what changed since the last list it handed out (changes()):
// every key a read or an event touched since, with what it held then, so
// that the daemon's pass after one event costs that event, not a list of
// every lease compared with the last.
import type { Lease } from '../lease';
import type { LeaseDelta, LeaseList } from '../manager';

/** A key as the watch or a range read returns it (etcd-http.ts's Kv, the fields used). */
export interface Kv {
  key: Buffer;
  value: Buffer;
  mod_revision: string;
  lease: string;
}

type Read = { lease?: Lease; why?: string };
type Entry = { stamp: string } & Read;
/** What endRead needs to tell whether the watch covered a range read. */
type ReadStart = { epoch: number; watched: boolean };

/** A range read is made at least this often, whatever the watch says. */
const MAX_AGE_MS = 10_000;

export class EtcdMirror {
  /** Each subnet key as last decoded, with its mod_revision and etcd lease: a range read decodes only what changed. */
  private readonly decoded = new Map<string, Entry>();
  /** `decoded` is etcd's state at this revision; undefined before the first range read. */
  private exactAt?: bigint;
  /** The revision of the last range read: events up to it are in it already. */
  private listedAt = -1n;
  /** The watch whose events count, and whether it delivers every change after exactAt. */
  private feeder?: object;
  /** The feeder is attached to etcd (not between a disconnection and the watch attaching itself again). */
  private attached = false;
  private covered = false;
  /** Bumped when the watch (re)connects: a range read started before does not prove coverage. */
  private epoch = 0;
  /** Events that came while a range read was in flight: replayed over its result. */
  private journal: { name: string; kv: Kv; deleted: boolean }[] = [];
  private listing = 0;
  /** Our own writes: until the watch has brought back this revision, lists read the range. */
  private mustSee = 0n;
  private lastRead = 0;
  /** The revision of the last list or delta handed out: what changes() counts from. */
  private mark?: string;
  /** Each key touched since the mark, with its entry then (undefined: it had none). */
  private readonly sinceMark = new Map<string, Entry | undefined>();

  constructor(private readonly decode: (name: string, raw: string, permanent: boolean) => Read) {}

  /** Whether a list may be answered from memory. */
  usable(now = Date.now()): boolean {
    return this.covered && this.listing === 0 && this.exactAt !== undefined && this.exactAt >= this.mustSee && now - this.lastRead < MAX_AGE_MS;
  }

  /** The leases in memory, as a list at revision exactAt; changes() counts from it. */
  list(): LeaseList {
    return this.handOut(String(this.exactAt));
  }

  /** The leases in memory as a list of `revision`, which becomes the mark. */
  private handOut(revision: string): LeaseList & { revision: string } {
    const out = { leases: [] as Lease[], bad: [] as LeaseList['bad'], revision };
    for (const [name, read] of this.decoded) {
      if (read.lease) out.leases.push(read.lease);
      else out.bad.push({ key: name, why: read.why! });
    }
    this.mark = revision;
    this.sinceMark.clear();
    return out;
  }

  /**
   * What changed since the list or delta of revision `since`, the last one
   * handed out (else undefined): the leases gone (a changed one's old object)
   * and come (its new one), by identity, and the keys that now cannot be read.
   * Its revision is the next mark. Exact as far as the memory is: the caller
   * makes sure it is usable(), or reads the range first.
   */
  changes(since: string): LeaseDelta | undefined {
    if (since !== this.mark || this.exactAt === undefined) return undefined;
    const out: LeaseDelta = { removed: [], added: [], bad: [], revision: String(this.exactAt) };
    for (const [name, then] of this.sinceMark) {
      const now = this.decoded.get(name);
      if (then?.lease && then.lease !== now?.lease) out.removed.push(then.lease);
      if (now?.lease && now.lease !== then?.lease) out.added.push(now.lease);
      if (now && !now.lease && now !== then) out.bad.push({ key: name, why: now.why! });
    }
    this.mark = out.revision;
    this.sinceMark.clear();
    return out;
  }

  /** Whether changes(since) can answer: `since` is the mark. */
  counts(since: string): boolean {
    return since === this.mark;
  }

  /** Records what `name` held at the mark, before its first change since. */
  private touch(name: string): void {
    if (this.mark !== undefined && !this.sinceMark.has(name)) this.sinceMark.set(name, this.decoded.get(name));
  }

  /** A range read starts: returns what endRead needs to tell whether the watch covered it. */
  beginRead(): ReadStart {
    this.listing++;
    return { epoch: this.epoch, watched: !!this.feeder };
  }

  /** The range read failed. */
  abortRead(): void {
    this.listing--;
  }

  /**
   * The range read's keys (name, kv) at `revision`: `decoded` becomes them,
   * then the events that came meanwhile. Returns the list of the read when
   * `handOut` (which then becomes the mark); without, the read only brings
   * the memory up to date for changes().
   */
  endRead(started: ReadStart, revision: string, kvs: { name: string; kv: Kv }[]): LeaseList & { revision: string };
  endRead(started: ReadStart, revision: string, kvs: { name: string; kv: Kv }[], handOut: false): undefined;
  endRead(started: ReadStart, revision: string, kvs: { name: string; kv: Kv }[], handOut = true): (LeaseList & { revision: string }) | undefined {
    this.listing--;
    const seen = new Set<string>();
    for (const { name, kv } of kvs) {
      seen.add(name);
      // a key unchanged since the last read (same mod_revision, same etcd lease) is not decoded again
      const stamp = `${kv.mod_revision}:${kv.lease}`;
      if (this.decoded.get(name)?.stamp !== stamp) {
        this.touch(name);
        this.decoded.set(name, { stamp, ...this.decode(name, kv.value.toString(), String(kv.lease) === '0') });
      }
    }
    if (this.decoded.size > seen.size) {
      for (const name of [...this.decoded.keys()]) {
        if (seen.has(name)) continue;
        this.touch(name);
        this.decoded.delete(name);
      }
    }
    this.exactAt = this.listedAt = BigInt(revision);
    this.lastRead = Date.now();
    const out = handOut ? this.handOut(revision) : undefined;
    // a watch that was up before the read started and is still the same delivers every change after it
    if (started.watched && this.feeder && this.attached && started.epoch === this.epoch) this.covered = true;
    for (const e of this.journal) this.apply(e.name, e.kv, e.deleted);
    if (this.listing === 0) this.journal = [];
    return out;
  }

  /** A watch was created (`from`: the first revision it delivers, when asked for one). */
  watching(feeder: object, from?: string): void {
    this.feeder = feeder;
    this.attached = true;
    this.epoch++;
    this.journal = [];
    this.covered = from !== undefined && this.exactAt !== undefined && BigInt(from) <= this.exactAt + 1n;
  }

  /** The watch is down, was cancelled or stopped: lists read the range until a read after it is up again. */
  lost(feeder: object, gone = false): void {
    if (feeder !== this.feeder) return;
    this.covered = false;
    this.attached = false;
    this.epoch++;
    if (gone) this.feeder = undefined;
  }

  /** The watch attached itself again (it resumes after the last revision it saw): a range read from now on covers it. */
  reattached(feeder: object): void {
    if (feeder !== this.feeder) return;
    this.covered = false;
    this.attached = true;
    this.epoch++;
  }

  /** An event of the watch, applied in order. */
  event(feeder: object, name: string, kv: Kv, deleted: boolean): void {
    if (feeder !== this.feeder) return;
    if (this.listing > 0) this.journal.push({ name, kv, deleted });
    try {
      this.apply(name, kv, deleted);
    } catch {
      this.covered = false; // not an event we can place (no revision): read the range next time
      this.epoch++;
    }
  }

  /** Our own write landed at `revision`. */
  wrote(revision: string | undefined): void {
    if (revision === undefined) {
      this.covered = false; // cannot tell when it comes back
      return;
    }
    const r = BigInt(revision);
    if (r > this.mustSee) this.mustSee = r;
  }

  private apply(name: string, kv: Kv, deleted: boolean): void {
    const rev = BigInt(kv.mod_revision);
    if (this.exactAt === undefined || rev <= this.listedAt) return; // in the last range read already
    this.touch(name);
    if (deleted) this.decoded.delete(name);
    else this.decoded.set(name, { stamp: `${kv.mod_revision}:${kv.lease}`, ...this.decode(name, kv.value.toString(), String(kv.lease) === '0') });
    if (rev > this.exactAt) this.exactAt = rev;
  }
}
