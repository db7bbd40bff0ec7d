import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { IP, Prefix } from '../../../src/net/ip';
import { Range, RangeSet, findOverlap } from '../../../src/ipam/range';

const ip = (s: string) => IP.parse(s)!;
function range(subnet: string, start: string, end: string, gateway: string): Range {
  return { subnet: Prefix.parse(subnet)!, start: ip(start), end: ip(end), gateway: ip(gateway) };
}
const list = (set: RangeSet, last?: string) => [...set.candidates(last ? ip(last) : undefined)].map((c) => c.ip.toString());

describe('RangeSet.candidates (the reference iterator)', () => {
  const set = new RangeSet([range('10.0.0.0/29', '10.0.0.1', '10.0.0.6', '10.0.0.1')], 0);

  it('starts at rangeStart without a last reservation and skips the gateway', () => {
    expect(list(set)).toEqual(['10.0.0.2', '10.0.0.3', '10.0.0.4', '10.0.0.5', '10.0.0.6']);
  });

  it('continues after the last reservation, wraps, and ends with it', () => {
    expect(list(set, '10.0.0.4')).toEqual(['10.0.0.5', '10.0.0.6', '10.0.0.2', '10.0.0.3', '10.0.0.4']);
  });

  it('ignores a last reservation outside the set', () => {
    expect(list(set, '192.168.0.9')).toEqual(list(set));
  });

  it('walks several ranges in order, wrapping to the first', () => {
    const multi = new RangeSet(
      [range('10.0.0.0/29', '10.0.0.5', '10.0.0.6', '10.0.0.1'), range('10.0.1.0/29', '10.0.1.2', '10.0.1.3', '10.0.1.1')],
      0,
    );
    expect(list(multi, '10.0.0.6')).toEqual(['10.0.1.2', '10.0.1.3', '10.0.0.5', '10.0.0.6']);
    expect(multi.capacity).toBe(4n);
  });

  it('yields every usable address exactly once, from any start (property)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 14 }), fc.integer({ min: 1, max: 14 }), fc.integer({ min: 1, max: 14 }), (a, b, last) => {
        const [lo, hi] = a <= b ? [a, b] : [b, a];
        const s = new RangeSet([range('10.9.0.0/28', `10.9.0.${lo}`, `10.9.0.${hi}`, '10.9.0.1')], 0);
        const seen = list(s, `10.9.0.${last}`);
        expect(new Set(seen).size).toBe(seen.length);
        expect(BigInt(seen.length)).toBe(s.capacity);
        expect(seen).not.toContain('10.9.0.1');
      }),
    );
  });
});

describe('findOverlap', () => {
  const span = (family: 4 | 6, a: number, b: number): Range => {
    const at = (v: number) => IP.fromBigInt(family, BigInt(v));
    return { subnet: Prefix.parse(family === 4 ? '0.0.0.0/0' : '::/0')!, start: at(Math.min(a, b)), end: at(Math.max(a, b)), gateway: at(0) };
  };
  const overlap = (x: Range, y: Range) => x.start.family === y.start.family && x.start.value <= y.end.value && y.start.value <= x.end.value;

  it('finds an overlapping pair exactly when the pairwise check does', () => {
    const arb = fc.array(fc.tuple(fc.constantFrom<4 | 6>(4, 6), fc.nat(200), fc.nat(200)), { maxLength: 12 });
    fc.assert(
      fc.property(arb, (spec) => {
        const ranges = spec.map(([f, a, b]) => span(f, a, b));
        const pairwise = ranges.some((x, i) => ranges.some((y, j) => i < j && overlap(x, y)));
        const found = findOverlap(ranges);
        expect(found !== undefined).toBe(pairwise);
        if (found) {
          expect(found[0]).toBeLessThan(found[1]);
          expect(overlap(ranges[found[0]], ranges[found[1]])).toBe(true);
        }
      }),
    );
  });
});
