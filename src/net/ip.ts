// IP addresses and prefixes. ipaddr.js parses IPv6 and formats it per RFC 5952
// (the same text as Go's net.IP.String(), which host-local uses as file names);
// arithmetic is on bigint so v4 and v6 share one code path.
import type ipaddrModule from 'ipaddr.js';

/** ipaddr.js, loaded on first use: only IPv6 needs it, and evaluating it costs every process ~0.2 ms. */
let ipaddrLoaded: typeof ipaddrModule | undefined;
const ipaddr = () => (ipaddrLoaded ??= require('ipaddr.js') as typeof ipaddrModule);

export type Family = 4 | 6;

const BITS: Record<Family, number> = { 4: 32, 6: 128 };

export class IP {
  private constructor(
    readonly family: Family,
    readonly value: bigint,
  ) {}

  static fromBigInt(family: Family, value: bigint): IP {
    const max = (1n << BigInt(BITS[family])) - 1n;
    if (value < 0n || value > max) throw new RangeError(`address out of range for IPv${family}`);
    return new IP(family, value);
  }

  /** Parses a strict dotted-quad IPv4 or an IPv6 address; IPv4-mapped IPv6 becomes IPv4, as in Go. */
  static parse(text: string): IP | undefined {
    if (typeof text !== 'string') return undefined;
    if (!text.includes(':')) return parseIPv4(text);
    if (text.includes('%')) return undefined; // zoned addresses are not host addresses
    let addr: ipaddrModule.IPv6;
    try {
      addr = ipaddr().IPv6.parse(text);
    } catch {
      return undefined;
    }
    if (addr.isIPv4MappedAddress()) return parseIPv4(addr.toIPv4Address().toString());
    let value = 0n;
    for (const part of addr.parts) value = (value << 16n) | BigInt(part);
    return new IP(6, value);
  }

  get bits(): number {
    return BITS[this.family];
  }

  toBytes(): number[] {
    if (this.family === 4) {
      const v = Number(this.value);
      return [v >>> 24, (v >>> 16) & 255, (v >>> 8) & 255, v & 255];
    }
    const bytes: number[] = [];
    for (const g of groups6(this.value)) bytes.push(g >>> 8, g & 255);
    return bytes;
  }

  toString(): string {
    if (this.family === 4) {
      const v = Number(this.value);
      // join, not a template: a template's text of 13 characters or more is a rope (V8's cons
      // string: ~25 bytes more than flat text), and thousands of peers keep these texts
      return [v >>> 24, (v >>> 16) & 255, (v >>> 8) & 255, v & 255].join('.');
    }
    return formatIPv6(this.value);
  }

  equals(other: IP | undefined): boolean {
    return !!other && other.family === this.family && other.value === this.value;
  }

  /** Orders by family first (v4 before v6), then numerically. */
  compare(other: IP): number {
    if (this.family !== other.family) return this.family - other.family;
    return this.value < other.value ? -1 : this.value > other.value ? 1 : 0;
  }

  next(): IP {
    return IP.fromBigInt(this.family, this.value + 1n);
  }

  prev(): IP {
    return IP.fromBigInt(this.family, this.value - 1n);
  }
}

/** The eight 16-bit groups of an IPv6 address, first to last. */
function groups6(value: bigint): number[] {
  const hi = value >> 64n;
  const lo = value & 0xffffffffffffffffn;
  const out: number[] = [];
  for (const half of [hi, lo]) {
    const a = Number(half >> 32n);
    const b = Number(half & 0xffffffffn);
    out.push(a >>> 16, a & 0xffff, b >>> 16, b & 0xffff);
  }
  return out;
}

/**
 * RFC 5952 text, as ipaddr.js's toRFC5952String() and Go's net.IP.String()
 * write it: lower-case hex groups without leading zeros, the first longest
 * run of two or more zero groups as "::". Made here from the bigint: through
 * ipaddr.js (bytes, an object, a regular expression) it cost ~30 µs an
 * address, which at 5,000 IPv6 peers was most of a reconcile pass.
 */
function formatIPv6(value: bigint): string {
  const g = groups6(value);
  let bestAt = -1;
  let bestLen = 1; // a single zero group is not compressed
  for (let i = 0; i < 8; ) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) {
      bestAt = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (from: number, to: number) => g.slice(from, to).map((x) => x.toString(16)).join(':');
  return bestAt < 0 ? hex(0, 8) : `${hex(0, bestAt)}::${hex(bestAt + bestLen, 8)}`;
}

// Our own IPv4 parser: ipaddr.js tries octal, hex and long forms first, which
// costs ~3 ms on its first call in every (short-lived) plugin process, and Go
// rejects those forms anyway. Decimal parts only, no leading zeros, as Go.
// Character by character: a regular expression is compiled on its first use,
// in every process (~0.15 ms).
function parseIPv4(text: string): IP | undefined {
  let value = 0;
  let part = 0;
  let digits = 0;
  let dots = 0;
  for (let i = 0; i <= text.length; i++) {
    const c = i < text.length ? text.charCodeAt(i) : 46; // the end closes the last part like a '.'
    if (c === 46) {
      if (digits === 0 || part > 255) return undefined;
      value = value * 256 + part;
      part = 0;
      digits = 0;
      dots++;
    } else if (c >= 48 && c <= 57) {
      if (digits === 1 && part === 0) return undefined; // a leading zero
      part = part * 10 + (c - 48);
      if (++digits > 3) return undefined;
    } else return undefined;
  }
  return dots === 4 ? IP.fromBigInt(4, BigInt(value)) : undefined;
}

/** Each prefix's toString(), beside the object (prefixes stay plain values for comparisons). */
const prefixTexts = new WeakMap<Prefix, string>();

/** A network prefix such as 10.1.0.0/16; `address` keeps whatever host bits the text had. */
export class Prefix {
  private constructor(
    readonly address: IP,
    readonly length: number,
  ) {}

  static parse(text: string): Prefix | undefined {
    if (typeof text !== 'string') return undefined;
    const slash = text.indexOf('/');
    if (slash < 0) return undefined;
    const address = IP.parse(text.slice(0, slash));
    const lenText = text.slice(slash + 1);
    if (!address || !/^\d{1,3}$/.test(lenText)) return undefined;
    const length = Number(lenText);
    if (length > address.bits) return undefined;
    return new Prefix(address, length);
  }

  static of(address: IP, length: number): Prefix {
    return new Prefix(address, length);
  }

  get family(): Family {
    return this.address.family;
  }

  private get hostMask(): bigint {
    return (1n << BigInt(this.address.bits - this.length)) - 1n;
  }

  /** The network address (host bits cleared). */
  get network(): IP {
    return IP.fromBigInt(this.family, this.address.value & ~this.hostMask);
  }

  /** The last address of the prefix (the IPv4 broadcast address). */
  get last(): IP {
    return IP.fromBigInt(this.family, this.network.value | this.hostMask);
  }

  get hasHostBits(): boolean {
    return (this.address.value & this.hostMask) !== 0n;
  }

  /** Number of addresses in the prefix. */
  get size(): bigint {
    return this.hostMask + 1n;
  }

  contains(ip: IP): boolean {
    return ip.family === this.family && (ip.value & ~this.hostMask) === this.network.value;
  }

  overlaps(other: Prefix): boolean {
    return this.contains(other.network) || other.contains(this.network);
  }

  /** The canonical network form, e.g. 10.1.0.0/16 (made once: passes key each lease's peers by it). */
  toString(): string {
    let text = prefixTexts.get(this);
    if (text === undefined) prefixTexts.set(this, (text = [this.network, this.length].join('/'))); // flat text, as IP's
    return text;
  }

  /** The address with its prefix length, e.g. 10.1.0.5/16 (a result's `address`). */
  toAddressString(): string {
    return `${this.address}/${this.length}`;
  }
}
