// Address and port ranges, the arithmetic an nftables interval set needs:
// its elements must not overlap (the kernel refuses an element that overlaps
// another), so everything is kept as sorted, disjoint, merged ranges.
import { IP, Prefix, type Family } from '../../net/ip';

/** An inclusive range [lo, hi]. */
export type Range<T extends bigint | number> = readonly [T, T];

export const ALL_ADDRESSES: Record<Family, Range<bigint>> = { 4: [0n, (1n << 32n) - 1n], 6: [0n, (1n << 128n) - 1n] };
export const ALL_PORTS: Range<number> = [0, 65535];

/** Sorted, disjoint, with touching ranges merged. */
export function normalize<T extends bigint | number>(ranges: Iterable<Range<T>>): Range<T>[] {
  const sorted = [...ranges].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const out: [T, T][] = [];
  for (const [lo, hi] of sorted) {
    const last = out[out.length - 1];
    // touching: the next range starts right after the last one ends
    if (last && lo <= (typeof hi === 'bigint' ? (((last[1] as bigint) + 1n) as T) : (((last[1] as number) + 1) as T))) {
      if (hi > last[1]) last[1] = hi;
    } else out.push([lo, hi]);
  }
  return out;
}

/** `ranges` without anything in `holes` (both normalized). */
export function subtract(ranges: readonly Range<bigint>[], holes: readonly Range<bigint>[]): Range<bigint>[] {
  const out: Range<bigint>[] = [];
  for (const [lo0, hi] of ranges) {
    let lo = lo0;
    for (const [hlo, hhi] of holes) {
      if (hhi < lo || hlo > hi) continue;
      if (hlo > lo) out.push([lo, hlo - 1n]);
      lo = hhi + 1n;
      if (lo > hi) break;
    }
    if (lo <= hi) out.push([lo, hi]);
  }
  return out;
}

export const prefixRange = (p: Prefix): Range<bigint> => [p.network.value, p.last.value];

export function rangeContains(ranges: readonly Range<bigint>[], v: bigint): boolean {
  let lo = 0;
  let hi = ranges.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (v < ranges[mid][0]) hi = mid - 1;
    else if (v > ranges[mid][1]) lo = mid + 1;
    else return true;
  }
  return false;
}

/** nft's text for an address range: a single address, a prefix when it is one, else lo-hi. */
export function addressRangeText(family: Family, [lo, hi]: Range<bigint>): string {
  const ip = (v: bigint) => IP.fromBigInt(family, v).toString();
  if (lo === hi) return ip(lo);
  const size = hi - lo + 1n;
  // a prefix: a power-of-two size, aligned on it
  if ((size & (size - 1n)) === 0n && lo % size === 0n) {
    let bits = 0;
    for (let s = size; s > 1n; s >>= 1n) bits++;
    return `${ip(lo)}/${(family === 4 ? 32 : 128) - bits}`;
  }
  return `${ip(lo)}-${ip(hi)}`;
}

export const portRangeText = ([lo, hi]: Range<number>) => (lo === hi ? String(lo) : `${lo}-${hi}`);

/** Whether two normalized range lists are the same. */
export function sameRanges<T extends bigint | number>(a: readonly Range<T>[], b: readonly Range<T>[]): boolean {
  return a.length === b.length && a.every((r, i) => r[0] === b[i][0] && r[1] === b[i][1]);
}
