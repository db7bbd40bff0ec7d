// One network's addresses: the Go-format store, our attachment index, the
// parking lot (stickyTTL) and the lock that serialises every call on the
// network, put together. The request handlers speak to it in their own terms
// (allocate for an owner, release an owner, collect garbage, is there room);
// keeping the index and the parkings in step with the store is this file's
// business alone.
import * as fs from 'node:fs';
import { join } from 'node:path';
import { CniError, ErrorCode } from '../cni/errors';
import { IP } from '../net/ip';
import { withLock } from '../util/lock';
import { ensureDir } from '../util/fs';
import { Allocation, ParkedAddresses, allocate } from './allocator';
import { AttachmentIndex, ReservationSource, StaleIndexError } from './attachment-index';
import { META_DIR, StoreLocation } from './config';
import { DiskStore, FileVisitor, Reservation, reservationContent, reservationName } from './disk-store';
import { describeFailure, onPath } from './io-failure';
import { Owner, ownerEquals } from './owner';
import { Parking, ParkingLot, Pod, podToString, samePod } from './parking-lot';
import type { RangeSet } from './range';

/** A reservation as listed: with the parking it belongs to, if it is parked. */
export interface ListedReservation extends Reservation {
  parking?: Parking;
}

const log = (msg: string) => process.stderr.write(`host-local: ${msg}\n`);

export class NetworkPool {
  private readonly store: DiskStore;
  private readonly index: AttachmentIndex;
  private readonly lot: ParkingLot;
  private readonly metaDir: string;

  constructor(private readonly where: StoreLocation) {
    this.metaDir = join(where.dataDir, META_DIR, where.network);
    this.store = new DiskStore(where.dataDir, where.network, this.metaDir);
    this.index = new AttachmentIndex(this.metaDir, this.store.dir);
    this.lot = new ParkingLot(this.metaDir);
  }

  /**
   * Gives `owner` one address in every range set (the ones it already holds
   * are kept: ADD is idempotent; what its pod parked comes back). Creates the
   * network's directory if needed.
   */
  async allocate(owner: Owner, sets: readonly RangeSet[], requested: ReadonlyMap<number, IP>, pod?: Pod): Promise<Allocation[]> {
    const allocations = await this.locked(true, () => {
      const held = this.heldBy(owner);
      const parked = new ParkedView(this.store, this.lot, pod && this.lot.get(pod, owner.ifname));
      this.index.invalidate();
      let result: Allocation[];
      try {
        result = allocate(this.store, { owner, sets, requested, held, parked });
      } catch (err) {
        // allocate() undid what it reserved, so the index is still right, unless the
        // disk failed under it: then the stamp stays removed and the next call rebuilds.
        if (!(err instanceof CniError && err.code === ErrorCode.IOFailure)) this.index.commit();
        throw err;
      }
      // Addresses held in range sets no longer configured stay held until DEL.
      const kept = held.filter((ip) => !result.some((a) => a.ip.equals(ip)));
      this.index.set(owner, [...result.map((a) => a.ip), ...kept]);
      parked.settle(result.filter((a) => a.unparked).map((a) => a.ip));
      return result;
    });
    if (!allocations) throw new CniError(ErrorCode.TryAgainLater, `the state directory of network ${this.where.network} was removed during ADD`);
    return allocations;
  }

  /**
   * Releases what (containerID, ifname) holds; with stickyTTL and a pod, parks
   * it for the pod instead. Like the reference, legacy files holding only the
   * container ID are released when nothing else matched. Never needs free
   * space: when the parking cannot be written, the addresses are released.
   */
  async release(owner: Owner, pod?: Pod): Promise<IP[]> {
    const released = await this.locked(false, () => {
      let key: Owner = owner;
      let ips = this.heldBy(key);
      if (ips.length === 0) {
        key = { containerId: owner.containerId };
        ips = this.heldBy(key);
      }
      if (ips.length === 0) return [];
      this.index.invalidate();
      const parked = pod !== undefined && key.ifname !== undefined && this.park(key, pod, ips);
      if (!parked) for (const ip of ips) this.store.release(ip);
      this.index.set(key, []);
      return ips;
    });
    return released ?? [];
  }

  /** What `owner` holds now (parked addresses are not held); nothing when the network has no state. */
  async held(owner: Owner): Promise<IP[]> {
    return (await this.locked(false, () => this.heldBy(owner))) ?? [];
  }

  /**
   * Releases every reservation `isGarbage` picks, and returns them. Parked
   * addresses are not garbage, unless `unpark` picks their parking.
   */
  async collect(isGarbage: (r: Reservation) => boolean, unpark: (p: Parking) => boolean = () => false): Promise<Reservation[]> {
    const collected = await this.locked(false, () => {
      // Parkings `unpark` picks are dropped first: their addresses are then judged like any other.
      const unparked = this.lot.all().filter(unpark);
      for (const p of unparked) this.lot.remove(p);
      const parked = new Set(this.parkedNow().map(String));
      const garbage = this.store.scan().filter((r) => !parked.has(r.name) && isGarbage(r));
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

  /**
   * The range sets without an address for an ADD (read without the lock:
   * STATUS is a hint). A parked address counts as available: a full set hands
   * out the oldest one.
   */
  fullRangeSets(sets: readonly RangeSet[]): RangeSet[] {
    const parked = new Set(this.parkedNow().map(String));
    const used = new Map<number, bigint>();
    const names = this.store.exists() ? fs.readdirSync(this.store.dir) : [];
    for (const name of names) {
      const ip = parked.has(name) ? undefined : reservationName(name);
      const set = ip && sets.find((s) => s.contains(ip));
      if (set) used.set(set.index, (used.get(set.index) ?? 0n) + 1n);
    }
    return sets.filter((s) => (used.get(s.index) ?? 0n) >= s.capacity);
  }

  /** Every reservation as it is on disk, with its parking (for listing; without the lock). */
  reservations(): ListedReservation[] {
    const parkings = this.lot.all();
    return this.store.scan().map((r) => {
      const parking = parkings.find((p) => p.ips.some((ip) => ip.equals(r.ip)) && !!r.owner && ownerEquals(r.owner, p.attachment));
      return parking ? { ...r, parking } : r;
    });
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
      return `cannot write state under ${this.metaDir}: ${describeFailure(err)}`;
    }
  }

  /**
   * Runs `fn` holding the network's lock, with a trustworthy index and ended
   * parkings released; undefined when there is no state and `create` is false
   * (or it was removed while we waited).
   */
  private async locked<T>(create: boolean, fn: () => T): Promise<T | undefined> {
    if (!create && !this.store.exists()) return undefined;
    if (create) {
      this.store.create();
      // Only ADD needs our directory (its scratch file); the others must work on a full filesystem.
      onPath('create', this.metaDir, () => ensureDir(this.metaDir));
    }
    // host-local runs in short-lived processes (a plugin call, `host-local ls`/`repair`): waiting blocks
    return withLock(join(this.store.dir, 'lock'), this.where.lockTimeoutMs, async () => {
      if (!this.store.exists()) return undefined; // removed while we waited
      this.store.discardStaged(); // a call killed mid-ADD may have left one
      try {
        const source = this.unparkedFiles();
        this.index.open(source);
        this.releaseEndedParkings();
        let result: T;
        try {
          result = fn();
        } catch (err) {
          if (!(err instanceof StaleIndexError)) throw err;
          log(`${err.message}; rebuilding the index`);
          this.index.rebuild(source);
          result = fn();
        }
        this.index.commit();
        return result;
      } finally {
        this.store.discardStaged();
      }
    }, { blocking: true });
  }

  /** What `owner` holds, each address checked against its file (the index is only a hint). */
  private heldBy(owner: Owner): IP[] {
    return this.index.get(owner).filter((ip) => {
      const holder = this.store.ownerOf(ip);
      return !!holder && ownerEquals(holder, owner);
    });
  }

  /**
   * The reservation files without the parked ones, for the index: a parked
   * address's file still names the attachment that parked it, which holds
   * nothing any more.
   */
  private unparkedFiles(): ReservationSource {
    const unparked = (visit: FileVisitor): FileVisitor => {
      const parked = new Map(this.lot.all().flatMap((p) => p.ips.map((ip) => [ip.toString(), p.attachment] as const)));
      return (name, content, fd) => {
        const by = parked.get(name);
        if (by && content && content.toString('utf8').trim() === reservationContent(by)) return;
        visit(name, content, fd);
      };
    };
    return {
      eachFile: (visit) => this.store.eachFile(unparked(visit)),
      eachFileChangedSince: (sinceMs, visit) => this.store.eachFileChangedSince(sinceMs, unparked(visit)),
    };
  }

  /** Addresses parked right now: their files still name the attachment that parked them. */
  private parkedNow(): IP[] {
    return this.lot.all().flatMap((p) => p.ips.filter((ip) => stillParked(this.store, p, ip)));
  }

  /** Parks `ips` for `pod` (a newer parking replaces the pod's older one); false when it cannot be written. */
  private park(attachment: Owner, pod: Pod, ips: IP[]): boolean {
    const ttl = this.where.stickyTtlMs;
    if (ttl === undefined) return false;
    const older = this.lot.get(pod, attachment.ifname);
    const now = Date.now();
    try {
      this.lot.save({ pod, attachment, ips, parkedAt: now, expiresAt: now + ttl });
    } catch (err) {
      log(`cannot park ${ips.join(', ')} for pod ${podToString(pod)} (${describeFailure(err)}); releasing them instead`);
      return false;
    }
    if (older) for (const ip of older.ips) if (stillParked(this.store, older, ip)) this.store.release(ip);
    return true;
  }

  /** Releases the addresses of every parking that has ended (checked by one small read per call). */
  private releaseEndedParkings(): void {
    const now = Date.now();
    if (!this.lot.due(now)) return;
    this.index.invalidate();
    const remaining: Parking[] = [];
    for (const p of this.lot.all()) {
      if (p.expiresAt > now) {
        remaining.push(p);
        continue;
      }
      const gone = p.ips.filter((ip) => stillParked(this.store, p, ip));
      for (const ip of gone) this.store.release(ip);
      this.lot.remove(p);
      if (gone.length) log(`the parking of ${gone.join(', ')} for pod ${podToString(p.pod)} ended; released`);
    }
    try {
      this.lot.resetNextExpiry(remaining);
    } catch (err) {
      log(`cannot record when the next parking ends (${describeFailure(err)}); the next call looks again`);
    }
  }
}

/** Whether `ip` is still parked by `p`: its file still names the attachment that parked it. */
function stillParked(store: DiskStore, p: Parking, ip: IP): boolean {
  const holder = store.ownerOf(ip);
  return !!holder && ownerEquals(holder, p.attachment);
}

/** The parkings one ADD sees: its own pod's, and the others' (read only when needed). */
class ParkedView implements ParkedAddresses {
  readonly mine: IP[];
  private others: Parking[] | undefined;

  constructor(
    private readonly store: DiskStore,
    private readonly lot: ParkingLot,
    private readonly own: Parking | undefined,
  ) {
    // The pod's own addresses: still parked, or free again (a failed ADD released them).
    this.mine = own ? own.ips.filter((ip) => this.store.ownerOf(ip) === undefined || stillParked(store, own, ip)) : [];
  }

  holderOf(ip: IP): { pod: string; until: number } | undefined {
    const p = this.otherParkings().find((o) => o.ips.some((x) => x.equals(ip)) && stillParked(this.store, o, ip));
    return p && { pod: podToString(p.pod), until: p.expiresAt };
  }

  oldestIn(set: RangeSet): IP[] {
    return this.otherParkings().flatMap((p) => p.ips.filter((ip) => set.contains(ip) && stillParked(this.store, p, ip)));
  }

  /** Takes the addresses this ADD got from parkings out of their records (best effort: records are checked on use). */
  settle(unparked: readonly IP[]): void {
    if (unparked.length === 0) return;
    for (const p of [...(this.own ? [this.own] : []), ...(this.others ?? [])]) {
      const left = p.ips.filter((ip) => !unparked.some((u) => u.equals(ip)));
      if (left.length === p.ips.length) continue;
      try {
        if (left.length === 0) this.lot.remove(p);
        else this.lot.save({ ...p, ips: left });
      } catch (err) {
        log(`cannot update the parking of pod ${podToString(p.pod)} (${describeFailure(err)})`);
      }
      if (p !== this.own) log(`${unparked.filter((u) => p.ips.some((ip) => ip.equals(u))).join(', ')} parked for pod ${podToString(p.pod)} handed out: no other address was free`);
    }
  }

  private otherParkings(): Parking[] {
    const own = this.own;
    return (this.others ??= this.lot.all().filter((p) => !(own && samePod(p.pod, own.pod) && p.attachment.ifname === own.attachment.ifname)));
  }
}

