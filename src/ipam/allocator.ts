// Choosing addresses: a requested address if it is free, otherwise round-robin
// from last_reserved_ip.<N> through the range set, exactly as the reference.
import { CniError, ErrorCode } from '../cni/errors';
import type { IPConfig } from '../cni/result';
import { IP } from '../net/ip';
import { Owner, ownerToString } from './owner';
import type { RangeSet } from './range';
import type { ReservationStore } from './reservation-store';

export interface Allocation {
  set: RangeSet;
  ip: IP;
  /** True when this call reserved it (and must release it on rollback). */
  fresh: boolean;
  /** Taken from a parking (the caller updates the parking records). */
  unparked?: boolean;
}

export function toIPConfig(a: Allocation): IPConfig {
  const range = a.set.rangeFor(a.ip)!;
  return { address: `${a.ip}/${range.subnet.length}`, gateway: range.gateway.toString() };
}

/**
 * Parked addresses as the allocator sees them (see parking-lot.ts), each one
 * checked against its file by the caller.
 */
export interface ParkedAddresses {
  /** Parked for this call's own pod (it was recreated): given back first, in every range set. */
  mine: readonly IP[];
  /** For whom and until when `ip` is parked, when it is parked for another pod. */
  holderOf(ip: IP): { pod: string; until: number } | undefined;
  /** Addresses parked for other pods in `set`, oldest parking first: taken only when nothing else is free. */
  oldestIn(set: RangeSet): IP[];
}

export interface AllocationRequest {
  owner: Owner;
  sets: readonly RangeSet[];
  /** Addresses the runtime asked for, by range set. */
  requested: ReadonlyMap<number, IP>;
  /** What the owner holds already: kept (ADD is idempotent). */
  held: readonly IP[];
  parked: ParkedAddresses;
}

/**
 * Gives the owner one address in every range set: the one it holds, else the
 * one it asked for, else its pod's parked one, else the next free one, else the
 * one parked longest for another pod. If any set fails, what this call
 * reserved is released.
 */
export function allocate(store: ReservationStore, req: AllocationRequest): Allocation[] {
  const done: Allocation[] = [];
  try {
    for (const set of req.sets) done.push(allocateIn(store, set, req));
    // Only once every set succeeded, so a failed ADD leaves the round-robin where it was.
    for (const a of done) if (a.fresh) store.setLastReserved(a.set.index, a.ip);
    return done;
  } catch (err) {
    for (const a of done) if (a.fresh) store.release(a.ip);
    throw err;
  }
}

function allocateIn(store: ReservationStore, set: RangeSet, req: AllocationRequest): Allocation {
  const { owner, parked } = req;
  const have = req.held.find((ip) => set.contains(ip));
  const want = req.requested.get(set.index);
  if (have) {
    if (want && !want.equals(have)) {
      throw new CniError(
        ErrorCode.InvalidNetworkConfig,
        `${ownerToString(owner)} already holds ${have} in range set ${set}; it cannot also have the requested ${want}`,
      );
    }
    return { set, ip: have, fresh: false };
  }
  const mine = parked.mine.find((ip) => set.contains(ip));
  if (want) {
    if (mine?.equals(want)) return { set, ip: takeOver(store, want, owner), fresh: true, unparked: true };
    return { set, ip: reserveRequested(store, set, want, req), fresh: true };
  }
  if (mine) return { set, ip: takeOver(store, mine, owner), fresh: true, unparked: true };
  const next = reserveNext(store, set, owner);
  if (next) return { set, ip: next, fresh: true };
  // A full range set still serves an ADD while another pod's address is parked.
  const oldest = parked.oldestIn(set)[0];
  if (oldest) return { set, ip: takeOver(store, oldest, owner), fresh: true, unparked: true };
  // Code 50, as STATUS answers for the same state: the plugin cannot service ADDs.
  throw new CniError(ErrorCode.PluginNotAvailable, `no IP addresses available in range set ${set}`);
}

/**
 * Gives a parked address (its file names the attachment that parked it, or it
 * is free again) to `owner`. Releasing and reserving are two steps, but the
 * network's lock keeps every other call out between them (the Go plugin too).
 */
function takeOver(store: ReservationStore, ip: IP, owner: Owner): IP {
  store.release(ip);
  if (!store.reserve(ip, owner)) throw new CniError(ErrorCode.TryAgainLater, `parked IP ${ip} was taken while it was handed over`);
  return ip;
}

function reserveRequested(store: ReservationStore, set: RangeSet, ip: IP, req: AllocationRequest): IP {
  if (store.reserve(ip, req.owner)) return ip;
  // Code 11: a holder may go away (a pod being replaced, a parking ending), so a later retry can succeed.
  const parking = req.parked.holderOf(ip);
  if (parking) {
    throw new CniError(
      ErrorCode.TryAgainLater,
      `requested IP ${ip} is parked for pod ${parking.pod} until ${new Date(parking.until).toISOString()} (range set ${set})`,
    );
  }
  const holder = store.ownerOf(ip);
  const who = holder ? `container ${ownerToString(holder)}` : 'an unreadable reservation';
  throw new CniError(ErrorCode.TryAgainLater, `requested IP ${ip} is already reserved by ${who} (range set ${set})`);
}

function reserveNext(store: ReservationStore, set: RangeSet, owner: Owner): IP | undefined {
  for (const { ip } of set.candidates(store.lastReserved(set.index))) {
    if (store.reserve(ip, owner)) return ip;
  }
  return undefined;
}
