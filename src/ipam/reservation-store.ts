// What the allocator needs from wherever reservations live (the Go plugin's
// backend.Store): the disk store in production, an in-memory map in tests.
import type { IP } from '../net/ip';
import type { Owner } from './owner';

export interface ReservationStore {
  /** The holder of `ip`: undefined when free, null when its record is unreadable. */
  ownerOf(ip: IP): Owner | null | undefined;
  /** Reserves `ip` for `owner` unless it is taken; true when reserved. */
  reserve(ip: IP, owner: Owner): boolean;
  release(ip: IP): void;
  /** Where range set `rangeSet`'s round-robin stopped last time. */
  lastReserved(rangeSet: number): IP | undefined;
  setLastReserved(rangeSet: number, ip: IP): void;
}
