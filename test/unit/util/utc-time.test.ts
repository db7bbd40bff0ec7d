import { describe, expect, it } from 'vitest';
import { httpDate, utcIso } from '../../../src/util/utc-time';

// Date's own formatters are the reference: utc-time.ts prints the same text without them.
const same = (ms: number) => {
  expect(utcIso(ms)).toBe(new Date(ms).toISOString());
  expect(httpDate(ms)).toBe(new Date(ms).toUTCString());
};

describe('utcIso / httpDate', () => {
  it('print what toISOString and toUTCString print: the epoch, either side of it, leap days, century years, the ends of years 0-9999', () => {
    for (const text of [
      '1970-01-01T00:00:00.000Z',
      '1969-12-31T23:59:59.999Z',
      '2000-02-29T12:34:56.789Z',
      '2024-02-29T23:59:59.999Z',
      '1900-02-28T00:00:00.001Z',
      '1900-03-01T00:00:00.000Z',
      '2100-03-01T00:00:00.000Z',
      '2026-11-29T08:30:00.000Z',
      '0000-01-01T00:00:00.000Z',
      '0000-03-01T00:00:00.000Z',
      '9999-12-31T23:59:59.999Z',
    ]) {
      const ms = Date.parse(text);
      same(ms);
      expect(utcIso(ms)).toBe(text);
    }
    expect(httpDate(Date.parse('1994-11-06T08:49:37Z'))).toBe('Sun, 06 Nov 1994 08:49:37 GMT'); // RFC 9110's example
  });

  it('agree with Date over 200,000 random times in years 0-9999, fractions of a millisecond cut toward zero', () => {
    const lo = Date.parse('0000-01-01T00:00:00Z');
    const hi = Date.parse('9999-12-31T23:59:59.999Z');
    for (let i = 0; i < 200_000; i++) {
      const ms = lo + Math.random() * (hi - lo);
      same(ms);
    }
  });

  it('outside years 0-9999 print what Date prints (extended years), and throw as it does for what is no time', () => {
    for (const ms of [Date.parse('+010000-01-01T00:00:00Z'), Date.parse('-000001-12-31T23:59:59.999Z'), 8.64e15, -8.64e15]) same(ms);
    expect(() => utcIso(NaN)).toThrow(RangeError);
    expect(() => utcIso(8.64e15 + 1)).toThrow(RangeError);
  });
});
