// The file store's lease files as last read (file-store.ts): each file's
// stat stamp and parsed lease, kept between lists so that a list re-reads only
// the files that changed. Which files may have changed is either found by a
// scan (readdir and a stat of every file: what a list does when nothing
// watches the directory) or told by the watch's notifications (mark()), so
// that a change costs the files it touched, not the directory.
import * as fs from 'node:fs';
import { join } from 'node:path';
import { readIfExists } from '../../util/fs';
import { Lease, decodeAttrs, parseLeaseKey } from '../lease';

/** The file-system calls the store makes: a seam for tests (counting reads, losing notifications). */
export interface FileIo {
  /** A file's text, undefined when it does not exist. */
  readFile(path: string): string | undefined;
  /** "size:mtime:inode", undefined when the file does not exist. */
  stamp(path: string): string | undefined;
  /** The names in a directory, [] when it does not exist. */
  readdir(path: string): string[];
  /** inotify on a directory: `onEvent(name)` for each entry created, written, renamed or removed (name null: unknown, e.g. the queue overflowed). */
  watch(dir: string, onEvent: (name: string | null) => void, onError: (err: Error) => void): { close(): void };
}

export const realIo: FileIo = {
  readFile: readIfExists,
  stamp(path) {
    try {
      const st = fs.statSync(path);
      return `${st.size}:${st.mtimeMs}:${st.ino}`;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
  },
  readdir(path) {
    try {
      return fs.readdirSync(path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
  },
  watch(dir, onEvent, onError) {
    const w = fs.watch(dir, { persistent: false }, (_event, name) => onEvent(name === null ? null : String(name)));
    w.on('error', onError);
    return w;
  },
};

export type LeaseRead = { lease?: Lease; raw?: string; why?: string };

/** One lease file's text as a lease, or why not (a bad name, bad JSON, a bad "Expiration"); {} when it is gone. */
export function parseLeaseFile(name: string, raw: string | undefined): LeaseRead {
  const subnets = parseLeaseKey(name);
  if (!subnets) return { why: 'the file name is not a subnet key like 10.244.1.0-24 or 10.244.1.0-24&fd00:10:244:1::-64' };
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

/** Names that are lease files: the atomic writes' temporary files (".<name>.<pid>.tmp") and the rest of the dot files are not. */
export const isLeaseName = (name: string) => !name.startsWith('.');

export class LeaseFiles {
  /** Every lease file present when last looked at, by name: its stamp then and what it held. */
  private readonly files = new Map<string, { stamp: string; read: LeaseRead }>();
  /** Names that may have changed since they were read: re-read by refresh(). */
  private readonly dirty = new Set<string>();
  /** Bumped whenever a file is added, replaced or removed in the picture: a list's revision. */
  generation = 0;

  /** The directory with its separator: a lease file's path is this and its name (path.join per file was an eighth of a scan's CPU). */
  private readonly prefix: string;

  constructor(
    private readonly dir: string,
    readonly io: FileIo,
  ) {
    this.prefix = join(dir, '/');
  }

  /** A notification (or our own write) said `name` changed. */
  mark(name: string): void {
    if (isLeaseName(name)) this.dirty.add(name);
  }

  /**
   * Stats every file and marks those whose stamp differs from the one read,
   * and those gone; true when any did. What a list does when no notification
   * can be trusted, and what the watch's safety scan does.
   */
  scan(): boolean {
    const names = this.io.readdir(this.dir).filter(isLeaseName);
    const present = new Set(names);
    let changed = false;
    for (const name of names) {
      const have = this.files.get(name);
      if (have && have.stamp === this.io.stamp(this.prefix + name)) continue;
      this.dirty.add(name);
      changed = true;
    }
    if (this.files.size + this.dirty.size > present.size) {
      for (const name of this.files.keys()) {
        if (!present.has(name)) {
          this.dirty.add(name);
          changed = true;
        }
      }
    }
    return changed;
  }

  /** Re-reads the marked files (a stat each; the text only when the stamp changed). */
  refresh(): void {
    for (const name of this.dirty) {
      const stamp = this.io.stamp(this.prefix + name);
      const have = this.files.get(name);
      if (stamp === undefined) {
        if (have) {
          this.files.delete(name);
          this.generation++;
        }
        continue;
      }
      if (have?.stamp === stamp) continue;
      this.files.set(name, { stamp, read: parseLeaseFile(name, this.io.readFile(this.prefix + name)) });
      this.generation++;
    }
    this.dirty.clear();
  }

  /** Each file as last read. */
  entries(): IterableIterator<[string, { stamp: string; read: LeaseRead }]> {
    return this.files.entries();
  }

  /** The first expiry after `since` among the leases read (Infinity: none). */
  nextExpiry(since: number): number {
    let next = Infinity;
    for (const { read } of this.files.values()) {
      const e = read.lease?.expiration;
      if (e !== undefined && e > since && e < next) next = e;
    }
    return next;
  }
}
