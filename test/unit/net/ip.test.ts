import { describe, expect, it } from 'vitest';
import ipaddr from 'ipaddr.js';
import fc from 'fast-check';
import { IP, Prefix } from '../../../src/net/ip';

describe('IP.parse / toString', () => {
  it.each([
    ['10.1.2.3', 4, '10.1.2.3'],
    ['0.0.0.0', 4, '0.0.0.0'],
    ['255.255.255.255', 4, '255.255.255.255'],
    ['fd00::1', 6, 'fd00::1'],
    ['FD00:0:0:0:0:0:0:1', 6, 'fd00::1'],
    ['2001:db8:0:0:1:0:0:1', 6, '2001:db8::1:0:0:1'], // first longest zero run, as Go
    ['2001:db8:0:1:1:1:1:1', 6, '2001:db8:0:1:1:1:1:1'], // a single zero group stays
    ['::', 6, '::'],
    ['::ffff:10.1.2.3', 4, '10.1.2.3'], // IPv4-mapped becomes IPv4, like Go's To4
  ])('%s', (text, family, canonical) => {
    const ip = IP.parse(text)!;
    expect(ip.family).toBe(family);
    expect(ip.toString()).toBe(canonical);
  });

  it.each(['', '10.1.2', '10.1.2.3.4', '010.1.2.3', '256.1.1.1', '10.1.2.3 ', '0x0a.1.2.3', 'fe80::1%eth0', '1::2::3', 'fd00::/64', 'abc',
    '10..1.2', '.1.2.3', '1.2.3.', '1.2.3.4.', '00.1.2.3', '1.2.3.04', '1234.1.1.1', '+1.2.3.4', '1.2.3.\u0663', '1.2.3.4\n'])(
    'rejects %j',
    (text) => {
      expect(IP.parse(text)).toBeUndefined();
    },
  );

  it('reads dotted quads exactly as Go does: four decimal parts of 0-255, no leading zeros', () => {
    const goIPv4 = /^(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})$/;
    const accepts = (t: string) => goIPv4.test(t) && t.split('.').every((p) => Number(p) <= 255);
    const part = fc.oneof(fc.nat(300).map(String), fc.constantFrom('00', '01', '007', '', '1000'));
    const quadLike = fc.array(part, { minLength: 3, maxLength: 5 }).map((parts) => parts.join('.'));
    fc.assert(
      fc.property(fc.oneof(quadLike, fc.stringMatching(/^[0-9.]{0,16}$/)), (text) => {
        expect(IP.parse(text)?.toString() ?? null).toBe(accepts(text) ? text : null);
      }),
      { numRuns: 5000 },
    );
  });

  it('round-trips every IPv4 and IPv6 value', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: (1n << 32n) - 1n }), (v) => {
        const ip = IP.fromBigInt(4, v);
        expect(IP.parse(ip.toString())!.value).toBe(v);
      }),
    );
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }), (v) => {
        const ip = IP.fromBigInt(6, v);
        const back = IP.parse(ip.toString())!;
        // IPv4-mapped values come back as IPv4 by design
        if (back.family === 6) expect(back.value).toBe(v);
        else expect(v >> 32n).toBe(0xffffn);
      }),
    );
  });

  it('writes IPv6 as RFC 5952 exactly as ipaddr.js (and Go) do: zero runs of every length and place, ties to the first', () => {
    const expected = (groups: number[]) => ipaddr.IPv6.parse(groups.map((g) => g.toString(16)).join(':')).toRFC5952String();
    const valueOf = (groups: number[]) => groups.reduce((v, g) => (v << 16n) | BigInt(g), 0n);
    // groups that are mostly zero, so that runs of every length and position come up
    const group = fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 0, max: 0xffff }));
    fc.assert(
      fc.property(fc.array(group, { minLength: 8, maxLength: 8 }), (groups) => {
        const ip = IP.fromBigInt(6, valueOf(groups));
        expect(ip.toString()).toBe(expected(groups));
        expect(ip.toBytes()).toEqual(ipaddr.IPv6.parse(expected(groups)).toByteArray());
      }),
      { numRuns: 2000 },
    );
    for (const [text, want] of [['::', '::'], ['::1', '::1'], ['1::', '1::'], ['1:0:0:1:0:0:0:1', '1:0:0:1::1'], ['1:0:0:2:0:0:3:4', '1::2:0:0:3:4'], ['fd80:0:0:1a::', 'fd80:0:0:1a::'], ['1:0:1:0:1:0:1:0', '1:0:1:0:1:0:1:0']]) {
      expect(IP.parse(text)!.toString()).toBe(want);
    }
    const prefix = Prefix.parse('fd80:0:0:1a::5/64')!;
    expect(prefix.toString()).toBe('fd80:0:0:1a::/64');
    expect(prefix.toString()).toBe('fd80:0:0:1a::/64'); // made once, the same after
  });

  it('orders and steps', () => {
    expect(IP.parse('10.0.0.255')!.next().toString()).toBe('10.0.1.0');
    expect(IP.parse('fd00::1:0')!.prev().toString()).toBe('fd00::ffff');
    expect(IP.parse('10.0.0.1')!.compare(IP.parse('10.0.0.2')!)).toBeLessThan(0);
    expect(() => IP.parse('255.255.255.255')!.next()).toThrow(RangeError);
  });
});

describe('Prefix', () => {
  it('parses and describes a network', () => {
    const p = Prefix.parse('10.1.0.0/16')!;
    expect(p.network.toString()).toBe('10.1.0.0');
    expect(p.last.toString()).toBe('10.1.255.255');
    expect(p.size).toBe(65536n);
    expect(p.hasHostBits).toBe(false);
    expect(p.contains(IP.parse('10.1.200.3')!)).toBe(true);
    expect(p.contains(IP.parse('10.2.0.0')!)).toBe(false);
    expect(p.contains(IP.parse('fd00::1')!)).toBe(false);
  });

  it('keeps host bits so callers can reject them', () => {
    const p = Prefix.parse('10.1.0.5/24')!;
    expect(p.hasHostBits).toBe(true);
    expect(p.toString()).toBe('10.1.0.0/24');
    expect(p.toAddressString()).toBe('10.1.0.5/24');
  });

  it.each(['10.0.0.0', '10.0.0.0/33', 'fd00::/129', '10.0.0.0/-1', '10.0.0.0/ 8', 'x/8'])('rejects %j', (t) => {
    expect(Prefix.parse(t)).toBeUndefined();
  });

  it('overlap is symmetric and matches containment', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffffffff }), fc.integer({ min: 8, max: 32 }), fc.integer({ min: 0, max: 0xffffffff }), fc.integer({ min: 8, max: 32 }), (a, la, b, lb) => {
        const pa = Prefix.of(IP.fromBigInt(4, BigInt(a)), la);
        const pb = Prefix.of(IP.fromBigInt(4, BigInt(b)), lb);
        expect(pa.overlaps(pb)).toBe(pb.overlaps(pa));
        expect(pa.overlaps(pb)).toBe(pa.contains(pb.network) || pb.contains(pa.network));
      }),
    );
  });
});
