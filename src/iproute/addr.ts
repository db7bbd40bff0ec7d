// Addresses: batch lines and the `addr_info` entries of `ip -json addr show`.
import type { Line } from './batch';

export interface AddrInfo {
  family: 'inet' | 'inet6';
  local: string;
  prefixlen: number;
  scope?: string;
  tentative?: boolean;
  dadfailed?: boolean;
  optimistic?: boolean;
  deprecated?: boolean;
  /** An IPv6 privacy (temporary) address. */
  temporary?: boolean;
  nodad?: boolean;
}

export interface AddrOptions {
  /** IPv6: skip duplicate address detection for this address. */
  nodad?: boolean;
  /** IPv4 broadcast: "+" derives it from the prefix. */
  broadcast?: string;
}

/** `addr add CIDR dev DEV` (fails with "File exists" when present). */
export function addrAdd(dev: string, cidr: string, o: AddrOptions = {}): Line {
  return ['addr', 'add', cidr, 'dev', dev, ...(o.broadcast ? ['broadcast', o.broadcast] : []), ...(o.nodad ? ['nodad'] : [])];
}

/** `addr replace CIDR dev DEV`: adds, or updates an identical address in place (idempotent). */
export function addrReplace(dev: string, cidr: string, o: AddrOptions = {}): Line {
  return ['addr', 'replace', cidr, 'dev', dev, ...(o.broadcast ? ['broadcast', o.broadcast] : []), ...(o.nodad ? ['nodad'] : [])];
}

export function addrDel(dev: string, cidr: string): Line {
  return ['addr', 'del', cidr, 'dev', dev];
}

/** "10.1.0.5/24" of an addr_info entry, as `ip` printed the address. */
export const addrCidr = (a: AddrInfo) => `${a.local}/${a.prefixlen}`;
