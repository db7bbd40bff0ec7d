// The attachment index: which addresses each (containerID, ifname) holds, so
// ADD and DEL cost the same with 10 or 60,000 reservations (the reference
// reads every reservation file on every call).
//
// It lives in <dataDir>/.cni-ts/<network>/ and is only a cache of the Go-format
// directory: 64 small bucket files of lines "<ip> <containerID>[ <ifname>]"
// (an attachment's lines are in the bucket its hash picks), so a call reads and
// rewrites one bucket, and a rebuild is one pass over the reservation files
// plus 64 writes. The key is what the Go plugin compares: a file's trimmed
// content, "<containerID>\r\n<ifname>" or a legacy bare ID. `stamp` records the
// network directory as our last change left it; the stamp is removed before
// every change we make and written after it. When another program changed the
// directory since (the Go plugin, a hand edit), the index is reconciled: every
// file is stat'ed and only those changed since our stamp are read (the
// directory's own ctime after our change, so the filesystem's clock is compared
// with itself). Without a stamp (a crash of ours between two writes, a first
// call, a damaged bucket) it is rebuilt by reading every file.
//
// Saving is best effort: when the index cannot be written (a full or read-only
// filesystem), the call goes on with what it read, the stamp stays removed,
// and the next call rebuilds. Nothing a call must do depends on writing it.
import * as fs from 'node:fs';
import { join } from 'node:path';
import { IP } from '../net/ip';
import { ensureDir, readIfExists, removeFile, removeTree } from '../util/fs';
import type { DiskStore } from './disk-store';
import type { Owner } from './owner';
import { describeFailure } from './io-failure';

/** Creating a file costs: 64 are written in ~3 ms (256 took ~19 ms); at 60,000 reservations a bucket is ~40 KB. */
const BUCKETS = 64;
/** The stamp's first word: a stamp of another format is as good as none. */
const FORMAT = 'v3';
/** Files whose status changed this long before our stamp are read again too: coarse or skewed timestamps. */
const CHANGE_SLACK_MS = 2000;
const SPACE = 0x20;
const NEWLINE = 0x0a;
const CR = 0x0d;

const bucketName = (i: number) => i.toString(16).padStart(2, '0');

/** FNV-1a over bytes: a cheap, stable spread of attachments over the buckets. */
function fnv(h: number, bytes: Uint8Array, start: number, end: number): number {
  for (let i = start; i < end; i++) h = Math.imul(h ^ bytes[i], 0x01000193);
  return h;
}
const FNV_BASIS = 0x811c9dc5;

/** The words of an owner as it appears in a line (the key's CR LF becomes a space). */
const wordsOf = (o: Owner) => (o.ifname === undefined ? o.containerId : `${o.containerId} ${o.ifname}`);

/** Owners with whitespace in a name cannot be a line's words; no valid CNI request can name them. */
const indexable = (o: Owner) => /^\S+$/.test(o.containerId) && (o.ifname === undefined || /^\S+$/.test(o.ifname));

/** The bucket of the key "<id>\r\n<ifname>" (hashed as the words "<id> <ifname>"). */
function bucketOf(o: Owner): number {
  const words = Buffer.from(wordsOf(o), 'utf8');
  return (fnv(FNV_BASIS, words, 0, words.length) >>> 0) % BUCKETS;
}

const isSpace = (b: number) => b === SPACE || (b >= 0x09 && b <= 0x0d);

/** Where a rebuild or a reconcile reads the reservation files from. */
export type ReservationSource = Pick<DiskStore, 'eachFile' | 'eachFileChangedSince'>;

interface Stamp {
  /** The network directory's inode and mtime (what says whether anyone changed it). */
  id: string;
  /** Its ctime after our change: files changed later are what another program did. */
  ctimeMs: number;
}

/** The index cannot be trusted (a bucket was damaged behind our back): rebuild it and try again. */
export class StaleIndexError extends Error {}

/** A rebuild's buckets as bytes: each file's line is appended without making a string of it. */
class BucketBytes {
  readonly bufs: Buffer[] = Array.from({ length: BUCKETS }, () => Buffer.allocUnsafe(1024));
  readonly lens: number[] = new Array<number>(BUCKETS).fill(0);

  /** Adds "<name> <key>\n" for a file whose content is the key (trimmed, as Go compares it). */
  add(name: string, content: Buffer): void {
    let start = 0;
    let end = content.length;
    while (start < end && isSpace(content[start])) start++;
    while (end > start && isSpace(content[end - 1])) end--;
    if (start === end) return; // torn: no owner
    let brk = -1; // where "\r\n" splits the ID from the ifname
    for (let i = start; i < end; i++) {
      if (!isSpace(content[i])) continue;
      if (brk >= 0 || content[i] !== CR || content[i + 1] !== NEWLINE) return; // not indexable
      brk = i++;
    }
    // The same hash as bucketOf(): over "<id>" or "<id> <ifname>".
    const hash = brk < 0 ? fnv(FNV_BASIS, content, start, end) : fnv(Math.imul(fnv(FNV_BASIS, content, start, brk) ^ SPACE, 0x01000193), content, brk + 2, end);
    const b = (hash >>> 0) % BUCKETS;
    let buf = this.bufs[b];
    let at = this.lens[b];
    const need = name.length + 2 + (end - start);
    if (at + need > buf.length) {
      const bigger = Buffer.allocUnsafe(Math.max(buf.length * 2, at + need));
      buf.copy(bigger, 0, 0, at);
      this.bufs[b] = buf = bigger;
    }
    at += buf.write(name, at, 'latin1'); // an IP address: ASCII
    buf[at++] = SPACE;
    if (brk < 0) at += content.copy(buf, at, start, end);
    else {
      at += content.copy(buf, at, start, brk);
      buf[at++] = SPACE;
      at += content.copy(buf, at, brk + 2, end);
    }
    buf[at++] = NEWLINE;
    this.lens[b] = at;
  }

  bytes(b: number): Buffer {
    return this.bufs[b].subarray(0, this.lens[b]);
  }
}

export class AttachmentIndex {
  private readonly bucketsDir: string;
  private readonly stampFile: string;
  /** Buckets read or changed in this call: their lines. */
  private readonly loaded = new Map<number, string[]>();
  private readonly dirty = new Set<number>();
  /** Rebuilt in this call: every bucket, to be saved whole. */
  private rebuilt: BucketBytes | undefined;
  /** The stamp was removed in this call: commit() has something to record. */
  private invalidated = false;

  constructor(
    metaDir: string,
    /** The Go-format directory the index describes. */
    private readonly networkDir: string,
    /** Tests pass 0 to tell old files from new without waiting out the slack. */
    private readonly changeSlackMs = CHANGE_SLACK_MS,
  ) {
    this.bucketsDir = join(metaDir, 'index');
    this.stampFile = join(metaDir, 'stamp');
  }

  /** Whether the directory is as our last change left it. */
  isFresh(): boolean {
    return this.savedStamp()?.id === this.currentStamp().id;
  }

  private currentStamp(): Stamp {
    const st = fs.statSync(this.networkDir, { bigint: true });
    return { id: `${FORMAT} ${st.ino} ${st.mtimeNs}`, ctimeMs: Number(st.ctimeNs / 1_000_000n) };
  }

  private savedStamp(): Stamp | undefined {
    const words = readIfExists(this.stampFile)?.split(' ');
    if (words?.length !== 4 || words[0] !== FORMAT) return undefined;
    const ctimeMs = Number(words[3]);
    return Number.isFinite(ctimeMs) ? { id: words.slice(0, 3).join(' '), ctimeMs } : undefined;
  }

  /**
   * Makes the index trustworthy: as it is when the directory is as we left it,
   * reconciled with what another program changed since, rebuilt when it has no
   * stamp to start from.
   */
  open(source: ReservationSource): void {
    const saved = this.savedStamp();
    const now = this.currentStamp();
    if (saved?.id === now.id) return;
    const sameDir = saved && saved.id.split(' ')[1] === now.id.split(' ')[1];
    // A clock set back since our stamp could hide a change: read everything then.
    if (sameDir && Date.now() >= saved.ctimeMs && this.reconcile(source, saved.ctimeMs - this.changeSlackMs)) return;
    this.rebuild(source);
  }

  /**
   * Brings the index up to date with the files changed since `sinceMs`, and
   * drops the lines of files that are gone; false when a bucket is damaged
   * (then only a rebuild will do).
   */
  private reconcile(source: ReservationSource, sinceMs: number): boolean {
    this.invalidate();
    const changed = new BucketBytes();
    const reread = new Set<string>();
    const names = source.eachFileChangedSince(sinceMs, (name, content) => {
      reread.add(name);
      if (content) changed.add(name, content);
    });
    try {
      for (let b = 0; b < BUCKETS; b++) {
        const lines = this.bucket(b);
        const ipOf = (l: string) => l.slice(0, l.indexOf(' '));
        const kept = lines.filter((l) => names.has(ipOf(l)) && !reread.has(ipOf(l)));
        const text = changed.bytes(b).toString('utf8');
        const added = text === '' ? [] : text.slice(0, -1).split('\n');
        if (kept.length === lines.length && added.length === 0) continue;
        this.loaded.set(b, [...kept, ...added]);
        this.dirty.add(b);
      }
    } catch (err) {
      if (!(err instanceof StaleIndexError)) throw err;
      this.loaded.clear();
      this.dirty.clear();
      return false;
    }
    return true;
  }

  /** Replaces the whole index with what one pass over the reservation files finds (saved by commit()). */
  rebuild(source: ReservationSource): void {
    this.invalidate();
    this.loaded.clear();
    this.dirty.clear();
    const buckets = new BucketBytes();
    source.eachFile((name, content) => content && buckets.add(name, content));
    this.rebuilt = buckets;
  }

  /** Addresses the index says `owner` holds (callers verify them against the files). */
  get(owner: Owner): IP[] {
    if (!indexable(owner)) return [];
    const words = ' ' + wordsOf(owner);
    const ips: IP[] = [];
    for (const line of this.bucket(bucketOf(owner))) {
      const sp = line.indexOf(' ');
      if (line.endsWith(words) && line.length - words.length === sp) {
        const ip = IP.parse(line.slice(0, sp));
        if (ip) ips.push(ip);
      }
    }
    return ips;
  }

  /** Call before changing the network directory: a crash from here on forces a rebuild. */
  invalidate(): void {
    removeFile(this.stampFile);
    this.invalidated = true;
  }

  /** Records what `owner` holds now (saved by commit()). */
  set(owner: Owner, ips: readonly IP[]): void {
    if (!indexable(owner)) return;
    const b = bucketOf(owner);
    const words = ' ' + wordsOf(owner);
    const lines = this.bucket(b).filter((l) => !(l.endsWith(words) && l.length - words.length === l.indexOf(' ')));
    for (const ip of ips) lines.push(ip.toString() + words);
    this.loaded.set(b, lines);
    this.dirty.add(b);
  }

  /**
   * Saves what changed (the whole index after a rebuild, else the changed
   * buckets) and stamps the directory as we leave it. Best effort: on failure
   * the stamp stays removed and the next call rebuilds.
   */
  commit(): void {
    if (!this.invalidated) return;
    try {
      if (this.rebuilt) this.saveAll(this.rebuilt);
      else {
        ensureDir(this.bucketsDir);
        for (const b of this.dirty) {
          const text = this.text(b);
          const file = join(this.bucketsDir, bucketName(b));
          if (text === '') removeFile(file);
          else writeWhole(file, text);
        }
      }
      this.dirty.clear();
      this.rebuilt = undefined;
      this.stamp();
      this.invalidated = false;
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      process.stderr.write(`host-local: the index was not saved (${e.path ?? this.bucketsDir}: ${describeFailure(err)}); the next call rebuilds it\n`);
    }
  }

  /** The whole index written beside the old one, then swapped in. */
  private saveAll(buckets: BucketBytes): void {
    const fresh = `${this.bucketsDir}.new`;
    removeTree(fresh);
    fs.mkdirSync(fresh, { recursive: true, mode: 0o700 });
    for (let b = 0; b < BUCKETS; b++) {
      const content = this.loaded.has(b) ? this.text(b) : buckets.bytes(b);
      if (content.length) fs.writeFileSync(join(fresh, bucketName(b)), content, { mode: 0o600 });
    }
    removeTree(this.bucketsDir);
    fs.renameSync(fresh, this.bucketsDir);
  }

  /**
   * Records the directory as we leave it. Its mtime is first set a second into
   * the past, a value no later change can produce: where the kernel's timestamps
   * are coarse (a tick of up to 10 ms before Linux 6.13), a change made by
   * another program in the same tick as ours would otherwise leave it unchanged.
   */
  private stamp(): void {
    const past = (Date.now() - 1000) / 1000;
    fs.utimesSync(this.networkDir, past, past); // the access time too: nothing reads it, and it saves a stat
    const { id, ctimeMs } = this.currentStamp();
    fs.writeFileSync(this.stampFile, `${id} ${ctimeMs}`, { mode: 0o600 });
  }

  private text(b: number): string {
    const lines = this.loaded.get(b)!;
    return lines.length ? lines.join('\n') + '\n' : '';
  }

  private bucket(b: number): string[] {
    let lines = this.loaded.get(b);
    if (lines) return lines;
    const text = this.rebuilt ? this.rebuilt.bytes(b).toString('utf8') : (readIfExists(join(this.bucketsDir, bucketName(b))) ?? '');
    if (text !== '' && !text.endsWith('\n')) throw new StaleIndexError(`index bucket ${bucketName(b)} is torn`);
    lines = text === '' ? [] : text.slice(0, -1).split('\n');
    if (lines.some((l) => l.indexOf(' ') <= 0)) throw new StaleIndexError(`index bucket ${bucketName(b)} has a damaged line`);
    this.loaded.set(b, lines);
    return lines;
  }
}

/** Written to a temporary name and renamed, so a crash leaves the old bucket or the new one. */
function writeWhole(file: string, content: string): void {
  const tmp = `${file}.tmp`;
  fs.writeFileSync(tmp, content, { mode: 0o600 });
  fs.renameSync(tmp, file);
}
