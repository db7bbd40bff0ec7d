// A node's lease: its subnet and how to reach it, in flannel's JSON schema
// (`<prefix>/subnets/10.244.1.0-24` = {"PublicIP", "PublicIPv6", "BackendType",
// "BackendData": {"VNI", "VtepMAC"}}), so leases written by flanneld and by us
// are read the same way.
import { IP, Prefix } from '../net/ip';

export interface LeaseAttrs {
  publicIP: IP;
  publicIPv6?: IP;
  backendType: string;
  vni?: number;
  vtepMAC?: string;
}

export interface Lease {
  subnet: Prefix;
  attrs: LeaseAttrs;
  /** When it expires (ms since the epoch); undefined when it never does. */
  expiration?: number;
}

const MAC_RE = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

export function isMac(s: unknown): s is string {
  return typeof s === 'string' && MAC_RE.test(s.toLowerCase());
}

/** `10.244.1.0/24` ⇄ `10.244.1.0-24` (flannel also appends `&<v6>-<len>` for dual stack). */
export function subnetKey(subnet: Prefix): string {
  return `${subnet.network}-${subnet.length}`;
}

export function parseSubnetKey(key: string): Prefix | undefined {
  const v4 = key.split('&')[0];
  const m = /^(\d+\.\d+\.\d+\.\d+)-(\d+)$/.exec(v4);
  if (!m) return undefined;
  const p = Prefix.parse(`${m[1]}/${m[2]}`);
  return p && p.family === 4 && !p.hasHostBits ? p : undefined;
}

/** flanneld's JSON for a lease value, byte for byte (Go struct order, omitempty). */
export function encodeAttrs(a: LeaseAttrs): string {
  const obj: Record<string, unknown> = { PublicIP: a.publicIP.toString() };
  if (a.publicIPv6) obj.PublicIPv6 = a.publicIPv6.toString();
  obj.BackendType = a.backendType;
  if (a.vtepMAC !== undefined || a.vni !== undefined) obj.BackendData = { VNI: a.vni ?? 1, VtepMAC: a.vtepMAC };
  return JSON.stringify(obj);
}

/** Reads a lease value; throws with a message naming the bad field. */
export function decodeAttrs(text: string): LeaseAttrs {
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(text) as Record<string, unknown>;
  } catch (err) {
    throw new Error(`lease is not JSON: ${(err as Error).message}`);
  }
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw new Error('lease must be a JSON object');
  const publicIP = typeof raw.PublicIP === 'string' ? IP.parse(raw.PublicIP) : undefined;
  if (!publicIP || publicIP.family !== 4) throw new Error(`lease field "PublicIP" must be an IPv4 address, got ${JSON.stringify(raw.PublicIP)}`);
  const attrs: LeaseAttrs = { publicIP, backendType: typeof raw.BackendType === 'string' ? raw.BackendType : '' };
  if (typeof raw.PublicIPv6 === 'string' && raw.PublicIPv6) {
    const v6 = IP.parse(raw.PublicIPv6);
    if (v6?.family === 6) attrs.publicIPv6 = v6;
  }
  const bd = raw.BackendData;
  if (bd && typeof bd === 'object' && !Array.isArray(bd)) {
    const data = bd as Record<string, unknown>;
    if (typeof data.VNI === 'number') attrs.vni = data.VNI;
    if (data.VtepMAC !== undefined) {
      if (!isMac(data.VtepMAC)) throw new Error(`lease field "BackendData.VtepMAC" must be a MAC address, got ${JSON.stringify(data.VtepMAC)}`);
      attrs.vtepMAC = data.VtepMAC.toLowerCase();
    }
  }
  return attrs;
}

/** A random locally administered unicast MAC, as the kernel gives a new device. */
export function randomMac(): string {
  const bytes = Array.from({ length: 6 }, () => Math.floor(Math.random() * 256));
  bytes[0] = (bytes[0] & 0xfe) | 0x02;
  return bytes.map((b) => b.toString(16).padStart(2, '0')).join(':');
}
