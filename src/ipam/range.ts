// Ranges and range sets: which addresses host-local may hand out, and in
// which order (the reference's round-robin iterator, wrapping across ranges).
import { IP, Prefix } from '../net/ip';

export interface Range {
  subnet: Prefix;
  /** First address handed out, inclusive. */
  start: IP;
  /** Last address handed out, inclusive. */
  end: IP;
  gateway: IP;
}

const rangeContains = (r: Range, ip: IP) =>
  ip.family === r.start.family && ip.compare(r.start) >= 0 && ip.compare(r.end) <= 0;

export const rangesOverlap = (a: Range, b: Range) =>
  a.start.family === b.start.family && a.start.compare(b.end) <= 0 && b.start.compare(a.end) <= 0;

export const rangeToString = (r: Range) => `${r.start}-${r.end}`;

/**
 * Two ranges of `ranges` that overlap, as their positions (lower first), or
 * undefined: n log n, for configs with thousands of ranges. In start order a
 * range can only overlap the one before it that reaches furthest.
 */
export function findOverlap(ranges: readonly Range[]): [number, number] | undefined {
  const order = ranges.map((_, i) => i).sort((a, b) => ranges[a].start.compare(ranges[b].start) || a - b);
  let furthest = -1;
  for (const i of order) {
    if (furthest >= 0 && rangesOverlap(ranges[furthest], ranges[i])) return furthest < i ? [furthest, i] : [i, furthest];
    // compare orders by family first: the first IPv6 range reaches past every IPv4 one
    if (furthest < 0 || ranges[i].end.compare(ranges[furthest].end) > 0) furthest = i;
  }
  return undefined;
}

/** One address per range set goes to each attachment; all ranges of a set share a family. */
export class RangeSet {
  constructor(
    readonly ranges: readonly Range[],
    readonly index: number,
  ) {}

  get family() {
    return this.ranges[0].start.family;
  }

  rangeFor(ip: IP): Range | undefined {
    return this.ranges.find((r) => rangeContains(r, ip));
  }

  contains(ip: IP): boolean {
    return this.rangeFor(ip) !== undefined;
  }

  overlaps(other: RangeSet): boolean {
    return findOverlap([...this.ranges, ...other.ranges]) !== undefined;
  }

  /** How many addresses the set can hand out (its gateways excluded). */
  get capacity(): bigint {
    let n = 0n;
    for (const r of this.ranges) {
      n += r.end.value - r.start.value + 1n;
      if (rangeContains(r, r.gateway)) n -= 1n;
    }
    return n;
  }

  /**
   * Candidates in the reference's order: from the address after `last` (when
   * it lies in this set) or from the first range's start, through every range,
   * wrapping, ending with `last` itself. Gateways are skipped.
   */
  *candidates(last: IP | undefined): Generator<{ ip: IP; range: Range }> {
    const n = this.ranges.length;
    let idx = 0;
    let cur: IP | undefined;
    if (last) {
      const i = this.ranges.findIndex((r) => rangeContains(r, last));
      if (i >= 0) {
        idx = i;
        cur = last;
      }
    }
    const advance = (): IP => {
      const r = this.ranges[idx];
      if (cur === undefined) return r.start;
      if (cur.equals(r.end)) {
        idx = (idx + 1) % n;
        return this.ranges[idx].start;
      }
      return cur.next();
    };
    const first = advance();
    cur = first;
    do {
      const range = this.ranges[idx];
      if (!cur.equals(range.gateway)) yield { ip: cur, range };
      cur = advance();
    } while (!cur.equals(first));
  }

  toString(): string {
    return this.ranges.map(rangeToString).join(',');
  }
}
