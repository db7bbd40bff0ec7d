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
}

export function toIPConfig(a: Allocation): IPConfig {
  const range = a.set.rangeFor(a.ip)!;
  return { address: `${a.ip}/${range.subnet.length}`, gateway: range.gateway.toString() };
}

/**
 * Gives `owner` one address in every range set, keeping the ones it already
 * holds (ADD is idempotent). If any set fails, what this call reserved is released.
 */
export function allocate(
  store: ReservationStore,
  sets: readonly RangeSet[],
  requested: ReadonlyMap<number, IP>,
  owner: Owner,
  held: readonly IP[],
): Allocation[] {
  const done: Allocation[] = [];
  try {
    for (const set of sets) {
      const have = held.find((ip) => set.contains(ip));
      const want = requested.get(set.index);
      if (have) {
        if (want && !want.equals(have)) {
          throw new CniError(
            ErrorCode.InvalidNetworkConfig,
            `${ownerToString(owner)} already holds ${have} in range set ${set}; it cannot also have the requested ${want}`,
          );
        }
        done.push({ set, ip: have, fresh: false });
      } else {
        done.push({ set, ip: want ? reserveRequested(store, set, want, owner) : reserveNext(store, set, owner), fresh: true });
      }
    }
    // Only once every set succeeded, so a failed ADD leaves the round-robin where it was.
    for (const a of done) if (a.fresh) store.setLastReserved(a.set.index, a.ip);
    return done;
  } catch (err) {
    for (const a of done) if (a.fresh) store.release(a.ip);
    throw err;
  }
}

function reserveRequested(store: ReservationStore, set: RangeSet, ip: IP, owner: Owner): IP {
  if (!store.reserve(ip, owner)) {
    const holder = store.ownerOf(ip);
    const who = holder ? `container ${ownerToString(holder)}` : 'an unreadable reservation';
    // Code 11: the holder may go away (a pod being replaced), so the runtime's retry can succeed.
    throw new CniError(ErrorCode.TryAgainLater, `requested IP ${ip} is already reserved by ${who} (range set ${set})`);
  }
  return ip;
}

function reserveNext(store: ReservationStore, set: RangeSet, owner: Owner): IP {
  for (const { ip } of set.candidates(store.lastReserved(set.index))) {
    if (store.reserve(ip, owner)) return ip;
  }
  // Code 50, as STATUS answers for the same state: the plugin cannot service ADDs.
  throw new CniError(ErrorCode.PluginNotAvailable, `no IP addresses available in range set ${set}`);
}
