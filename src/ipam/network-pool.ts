// One network's addresses: the Go-format store, our attachment index and the
// lock that serialises every call on the network, put together. The request
// handlers speak to it in their own terms (allocate for an owner, release an
// owner, collect garbage, is there room); keeping the index in step with the
// store is this file's business alone.
import * as fs from 'node:fs';
import { join } from 'node:path';
import { CniError, ErrorCode } from '../cni/errors';
import { IP } from '../net/ip';
import { withLock } from '../util/lock';
import { ensureDir } from '../util/fs';
import { onPath } from './io-failure';
import { Allocation, allocate } from './allocator';
import { AttachmentIndex, StaleIndexError } from './attachment-index';
import { META_DIR, StoreLocation } from './config';
import { DiskStore, Reservation, reservationName } from './disk-store';
import { Owner, ownerEquals } from './owner';
import type { RangeSet } from './range';


export class NetworkPool {
  private readonly store: DiskStore;
  private readonly index: AttachmentIndex;
  private readonly metaDir: string;
  private readonly network: string;
  private readonly lockTimeoutMs: number;

  constructor(where: StoreLocation) {
    this.network = where.network;
    this.lockTimeoutMs = where.lockTimeoutMs;
    this.metaDir = join(where.dataDir, META_DIR, where.network);
    this.store = new DiskStore(where.dataDir, where.network, this.metaDir);
    this.index = new AttachmentIndex(this.metaDir, this.store.dir);
  }

  /**
   * Gives `owner` one address in every range set (the ones it already holds
   * are kept: ADD is idempotent). Creates the network's directory if needed.
   */
  async allocate(owner: Owner, sets: readonly RangeSet[], requested: ReadonlyMap<number, IP>): Promise<Allocation[]> {
    const allocations = await this.locked(true, () => {
      const held = this.heldBy(owner);
      this.index.invalidate();
      let result: Allocation[];
      try {
        result = allocate(this.store, sets, requested, owner, held);
      } catch (err) {
        // allocate() undid what it reserved, so the index is still right, unless the
        // disk failed under it: then the stamp stays removed and the next call rebuilds.
        if (!(err instanceof CniError && err.code === ErrorCode.IOFailure)) this.index.commit();
        throw err;
      }
      // Addresses held in range sets no longer configured stay held until DEL.
      const kept = held.filter((ip) => !result.some((a) => a.ip.equals(ip)));
      this.index.set(owner, [...result.map((a) => a.ip), ...kept]);
      return result;
    });
    if (!allocations) throw new CniError(ErrorCode.TryAgainLater, `the state directory of network ${this.network} was removed during ADD`);
    return allocations;
  }

  /**
   * Releases what (containerID, ifname) holds. Like the reference, legacy files
   * holding only the container ID are released when nothing else matched.
   */
  async release(owner: Owner): Promise<IP[]> {
    const released = await this.locked(false, () => {
      let key: Owner = owner;
      let ips = this.heldBy(key);
      if (ips.length === 0) {
        key = { containerId: owner.containerId };
        ips = this.heldBy(key);
      }
      if (ips.length === 0) return [];
      this.index.invalidate();
      for (const ip of ips) this.store.release(ip);
      this.index.set(key, []);
      return ips;
    });
    return released ?? [];
  }

  /** What `owner` holds now; nothing when the network has no state. */
  async held(owner: Owner): Promise<IP[]> {
    return (await this.locked(false, () => this.heldBy(owner))) ?? [];
  }

  /** Releases every reservation `isGarbage` picks, and returns them. */
  async collect(isGarbage: (r: Reservation) => boolean): Promise<Reservation[]> {
    const collected = await this.locked(false, () => {
      const garbage = this.store.scan().filter(isGarbage);
      if (garbage.length === 0) return [];
      this.index.invalidate();
      const owners = new Map<string, Owner>();
      for (const r of garbage) {
        this.store.release(r.ip);
        if (r.owner) owners.set(JSON.stringify(r.owner), r.owner);
      }
      // Only the released attachments' entries change; the index stays valid for the rest.
      for (const o of owners.values()) this.index.set(o, []);
      return garbage;
    });
    return collected ?? [];
  }

  /** The range sets without a free address (read without the lock: STATUS is a hint). */
  fullRangeSets(sets: readonly RangeSet[]): RangeSet[] {
    const used = new Map<number, bigint>();
    const names = this.store.exists() ? fs.readdirSync(this.store.dir) : [];
    for (const name of names) {
      const ip = reservationName(name);
      const set = ip && sets.find((s) => s.contains(ip));
      if (set) used.set(set.index, (used.get(set.index) ?? 0n) + 1n);
    }
    return sets.filter((s) => (used.get(s.index) ?? 0n) >= s.capacity);
  }

  /** Every reservation as it is on disk, without the lock (for listing). */
  reservations(): Reservation[] {
    return this.store.scan();
  }

  /** Why state cannot be written here (STATUS), or undefined when it can: a real write, not a permission guess. */
  probeWritable(): string | undefined {
    const probe = join(this.metaDir, `status-probe.${process.pid}`);
    try {
      ensureDir(this.metaDir);
      fs.writeFileSync(probe, 'ok', { mode: 0o600 });
      fs.unlinkSync(probe);
      return undefined;
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      return `cannot write state under ${this.metaDir}: ${e.code ?? e.message}`;
    }
  }

  /**
   * Runs `fn` holding the network's lock, with a trustworthy index; undefined
   * when there is no state and `create` is false (or it was removed while we waited).
   */
  private async locked<T>(create: boolean, fn: () => T): Promise<T | undefined> {
    if (!create && !this.store.exists()) return undefined;
    if (create) {
      this.store.create();
      // Only ADD needs our directory (its scratch file); the others must work on a full filesystem.
      onPath('create', this.metaDir, () => ensureDir(this.metaDir));
    }
    return withLock(join(this.store.dir, 'lock'), this.lockTimeoutMs, async () => {
      if (!this.store.exists()) return undefined; // removed while we waited
      this.store.discardStaged(); // a call killed mid-ADD may have left one
      try {
        this.index.open(this.store);
        let result: T;
        try {
          result = fn();
        } catch (err) {
          if (!(err instanceof StaleIndexError)) throw err;
          process.stderr.write(`host-local: ${err.message}; rebuilding the index\n`);
          this.index.rebuild(this.store);
          result = fn();
        }
        this.index.commit();
        return result;
      } finally {
        this.store.discardStaged();
      }
    });
  }

  /** What `owner` holds, each address checked against its file (the index is only a hint). */
  private heldBy(owner: Owner): IP[] {
    return this.index.get(owner).filter((ip) => {
      const holder = this.store.ownerOf(ip);
      return !!holder && ownerEquals(holder, owner);
    });
  }
}
