// The attachment index: which addresses each (containerID, ifname) holds, so
// ADD and DEL cost the same with 10 or 60,000 reservations (the reference
// reads every reservation file on every call).
//
// It lives beside the Go-format directory, in <dataDir>/.cni-ts/<network>/,
// and is only a cache: a "stamp" records the network directory's inode and
// mtime after our last change. If anything else (the Go plugin, a hand edit)
// changed the directory since, the stamps differ and the index is rebuilt by
// one scan. The stamp is removed before every change we make and written back
// after it, so a crash in between also forces a rebuild on the next call.
import * as fs from 'node:fs';
import { join } from 'node:path';
import { IP } from '../net/ip';
import { readIfExists, removeFile, removeTree } from '../util/fs';
import { sha256Hex } from '../util/sha256';
import type { DiskStore, Reservation } from './disk-store';
import type { Owner } from './owner';

interface Entry {
  containerID: string;
  ifname: string | null;
  ips: string[];
}

/**
 * File name of an attachment's entry: "<containerID>@<hex ifname>" (legacy
 * owners: the bare ID), readable for operators; hashed when too long for a name.
 * Container IDs cannot contain '@' or '#', so the forms never collide.
 */
function keyOf(o: Owner): string {
  const name = o.ifname === undefined ? o.containerId : `${o.containerId}@${Buffer.from(o.ifname).toString('hex')}`;
  return name.length <= 200 ? name : '#' + sha256Hex(name);
}

/** The index cannot be trusted (an entry was damaged behind our back): rebuild it and try again. */
export class StaleIndexError extends Error {}

export class AttachmentIndex {
  private readonly entriesDir: string;
  private readonly stampFile: string;

  constructor(
    metaDir: string,
    private readonly store: DiskStore,
  ) {
    this.entriesDir = join(metaDir, 'attachments');
    this.stampFile = join(metaDir, 'stamp');
  }

  private currentStamp(): string {
    const st = fs.statSync(this.store.dir, { bigint: true });
    return `${st.ino}:${st.mtimeNs}:${st.ctimeNs}`;
  }

  isFresh(): boolean {
    try {
      return fs.readFileSync(this.stampFile, 'utf8') === this.currentStamp();
    } catch {
      return false;
    }
  }

  /** Makes the index trustworthy, rebuilding it when the directory changed behind our back. */
  async open(): Promise<void> {
    if (!this.isFresh()) await this.rebuild(await this.store.scan());
  }

  /** Replaces the whole index with what a scan found, and stamps it. */
  async rebuild(reservations: Reservation[]): Promise<void> {
    this.invalidate();
    const byKey = new Map<string, Entry>();
    for (const r of reservations) {
      if (!r.owner) continue;
      const key = keyOf(r.owner);
      let e = byKey.get(key);
      if (!e) byKey.set(key, (e = { containerID: r.owner.containerId, ifname: r.owner.ifname ?? null, ips: [] }));
      e.ips.push(r.ip.toString());
    }
    const fresh = `${this.entriesDir}.new`;
    removeTree(fresh);
    fs.mkdirSync(fresh, { mode: 0o700 });
    let n = 0;
    for (const [key, entry] of byKey) {
      if (++n % 1000 === 0) await new Promise((r) => setImmediate(r));
      fs.writeFileSync(join(fresh, key), JSON.stringify(entry), { mode: 0o600 });
    }
    removeTree(this.entriesDir);
    fs.renameSync(fresh, this.entriesDir);
    this.stamp();
  }

  /** Addresses the index says `owner` holds (callers verify them against the files). */
  get(owner: Owner): IP[] {
    const text = readIfExists(join(this.entriesDir, keyOf(owner)));
    if (text === undefined) return [];
    let entry: Entry;
    try {
      entry = JSON.parse(text) as Entry;
    } catch {
      throw new StaleIndexError(`index entry for ${owner.containerId} is not JSON`);
    }
    return entry.ips.map((s) => IP.parse(s)).filter((ip): ip is IP => ip !== undefined);
  }

  /** Call before changing the network directory: a crash from here on forces a rebuild. */
  invalidate(): void {
    removeFile(this.stampFile);
  }

  set(owner: Owner, ips: IP[]): void {
    const file = join(this.entriesDir, keyOf(owner));
    if (ips.length === 0) {
      removeFile(file);
      return;
    }
    const entry: Entry = { containerID: owner.containerId, ifname: owner.ifname ?? null, ips: ips.map(String) };
    fs.writeFileSync(file, JSON.stringify(entry), { mode: 0o600 });
  }

  /** Records the directory as we left it. */
  stamp(): void {
    fs.writeFileSync(this.stampFile, this.currentStamp(), { mode: 0o600 });
  }
}
