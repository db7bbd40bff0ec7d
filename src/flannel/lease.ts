// A node's lease: its subnets and how to reach it, in flannel's schema, so
// leases written by flanneld and by us are read the same way.
//
//   key    <prefix>/subnets/10.244.1.0-24                      IPv4 only
//          <prefix>/subnets/10.244.1.0-24&fd00:10:244:1::-64   dual stack (flannel's MakeSubnetKey)
//          <prefix>/subnets/fd00:10:244:1::-64                 IPv6 only
//   value  {"PublicIP","PublicIPv6","BackendType","BackendData":{"VNI","VtepMAC"},"BackendV6Data":{"VNI","VtepMAC"}}
//
// The subnets live in the key only (flannel's Lease.IPv6Subnet comes from the
// key too); the value is flannel's LeaseAttrs, field for field.
import { IP, Prefix } from '../net/ip';
import { printable } from './log';

export interface LeaseAttrs {
  /** IPv4 underlay address; undefined on an IPv6-only node (flannel writes "0.0.0.0"). */
  publicIP?: IP;
  publicIPv6?: IP;
  backendType: string;
  /** BackendData: the IPv4 VTEP (flannel.<VNI>). */
  vni?: number;
  vtepMAC?: string;
  /** BackendV6Data: the IPv6 VTEP (flannel-v6.<VNI>). */
  v6Vni?: number;
  v6VtepMAC?: string;
}

/** The subnets a lease holds: what its key says. At least one is set. */
export interface LeaseSubnets {
  subnet?: Prefix;
  ipv6Subnet?: Prefix;
}

export interface Lease extends LeaseSubnets {
  attrs: LeaseAttrs;
  /** When it expires (ms since the epoch); undefined when it never does. */
  expiration?: number;
  /**
   * The value exactly as the store holds it (flanneld writes `"PublicIPv6":null`,
   * a hand-written lease may have any spacing): a guarded rewrite compares
   * against this, never against our own re-encoding of `attrs`.
   */
  raw?: string;
  /**
   * Held without a TTL: a flannel reservation (an etcd key attached to no etcd
   * lease; a lease file without "Expiration"). Adopting or re-writing it keeps
   * it that way.
   */
  permanent?: boolean;
  /** The Kubernetes Node it was read from (the kube subnet manager), for people reading status. */
  node?: string;
  /**
   * When its node came (ms since the epoch: the Node's creationTimestamp), when
   * the manager knows: of two overlapping leases, the one that came first is
   * the established one (backend/subnet-claims.ts).
   */
  since?: number;
}

/** One family's part of a key: `10.244.1.0/24` → `10.244.1.0-24`, `fd00:10:244:1::/64` → `fd00:10:244:1::-64`. */
export function subnetKey(subnet: Prefix): string {
  return `${subnet.network}-${subnet.length}`;
}

/** flannel's MakeSubnetKey: the IPv4 part, `&` and the IPv6 part when both are set. */
export function leaseKey(s: LeaseSubnets): string {
  const parts = [s.subnet, s.ipv6Subnet].filter((p): p is Prefix => !!p).map(subnetKey);
  if (parts.length === 0) throw new Error('a lease needs an IPv4 or an IPv6 subnet');
  return parts.join('&');
}

/** Whether two leases hold the same subnets (leaseKey's equality, without writing the keys: a scan of thousands of leases). */
export function sameSubnets(a: LeaseSubnets, b: LeaseSubnets): boolean {
  return samePrefix(a.subnet, b.subnet) && samePrefix(a.ipv6Subnet, b.ipv6Subnet);
}

const samePrefix = (a: Prefix | undefined, b: Prefix | undefined) => a === b || (!!a && !!b && a.length === b.length && a.address.equals(b.address));

/** For log lines: `10.244.1.0/24`, `10.244.1.0/24 + fd00:10:244:1::/64`. */
export function describeSubnets(s: LeaseSubnets): string {
  return [s.subnet, s.ipv6Subnet].filter(Boolean).join(' + ');
}

function keyPart(text: string, family: 4 | 6): Prefix | undefined {
  const dash = text.lastIndexOf('-');
  if (dash <= 0 || !/^\d{1,3}$/.test(text.slice(dash + 1))) return undefined;
  const p = Prefix.parse(`${text.slice(0, dash)}/${text.slice(dash + 1)}`);
  return p && p.family === family && !p.hasHostBits ? p : undefined;
}

/** Reads a key (see above); undefined when it is not one. */
export function parseLeaseKey(key: string): LeaseSubnets | undefined {
  const parts = key.split('&');
  if (parts.length > 2) return undefined;
  if (parts.length === 2) {
    const subnet = keyPart(parts[0], 4);
    const ipv6Subnet = keyPart(parts[1], 6);
    return subnet && ipv6Subnet ? { subnet, ipv6Subnet } : undefined;
  }
  if (key.includes(':')) {
    const ipv6Subnet = keyPart(key, 6);
    return ipv6Subnet ? { ipv6Subnet } : undefined;
  }
  const subnet = keyPart(key, 4);
  return subnet ? { subnet } : undefined;
}

export const subnetOf = (l: LeaseSubnets, family: 4 | 6): Prefix | undefined => (family === 4 ? l.subnet : l.ipv6Subnet);

/** Whether any lease holds a subnet overlapping `subnet` (of its family). */
export function taken(subnet: Prefix, leases: readonly LeaseSubnets[]): boolean {
  return leases.some((l) => subnetOf(l, subnet.family)?.overlaps(subnet));
}

/**
 * The JSON we write for a lease value: flanneld's LeaseAttrs in Go struct
 * order, compact; PublicIP is always there ("0.0.0.0" on an IPv6-only node).
 * flanneld itself also writes "PublicIPv6":null (no omitempty): we leave it
 * out, which flanneld reads the same. Never compare stored values with this
 * re-encoding: keep a Lease's `raw`.
 */
export function encodeAttrs(a: LeaseAttrs): string {
  const obj: Record<string, unknown> = { PublicIP: a.publicIP?.toString() ?? '0.0.0.0' };
  if (a.publicIPv6) obj.PublicIPv6 = a.publicIPv6.toString();
  obj.BackendType = a.backendType;
  if (a.vtepMAC !== undefined || a.vni !== undefined) obj.BackendData = { VNI: a.vni ?? 1, VtepMAC: a.vtepMAC };
  if (a.v6VtepMAC !== undefined || a.v6Vni !== undefined) obj.BackendV6Data = { VNI: a.v6Vni ?? 1, VtepMAC: a.v6VtepMAC };
  return JSON.stringify(obj);
}

function backendData(raw: Record<string, unknown>, field: 'BackendData' | 'BackendV6Data'): { vni?: number; mac?: string } {
  const bd = raw[field];
  if (!bd || typeof bd !== 'object' || Array.isArray(bd)) return {};
  const data = bd as Record<string, unknown>;
  const out: { vni?: number; mac?: string } = {};
  if (typeof data.VNI === 'number') out.vni = data.VNI;
  if (data.VtepMAC !== undefined) {
    const mac = typeof data.VtepMAC === 'string' && /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i.test(data.VtepMAC) ? data.VtepMAC.toLowerCase() : undefined;
    if (!mac) throw new Error(`lease field "${field}.VtepMAC" must be a MAC address, got ${JSON.stringify(data.VtepMAC)}`);
    out.mac = mac;
  }
  return out;
}

/**
 * Whether two lease values carry the same attributes, however they are
 * spelled (field order, spacing, `"PublicIPv6":null`, MAC case, extra fields
 * such as the file store's "Expiration"). Unreadable values are never the same.
 */
export function sameAttrs(a: string, b: string): boolean {
  try {
    return encodeAttrs(decodeAttrs(a)) === encodeAttrs(decodeAttrs(b));
  } catch {
    return false;
  }
}

/** Reads a lease value; throws with a message naming the bad field. */
export function decodeAttrs(text: string): LeaseAttrs {
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(text) as Record<string, unknown>;
  } catch (err) {
    throw new Error(`lease is not JSON: ${printable((err as Error).message)}`); // V8 quotes the text, raw newlines and all
  }
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw new Error('lease must be a JSON object');
  const attrs: LeaseAttrs = { backendType: typeof raw.BackendType === 'string' ? raw.BackendType : '' };
  if (raw.PublicIP !== undefined && raw.PublicIP !== null) {
    const publicIP = typeof raw.PublicIP === 'string' ? IP.parse(raw.PublicIP) : undefined;
    if (!publicIP || publicIP.family !== 4) throw new Error(`lease field "PublicIP" must be an IPv4 address, got ${JSON.stringify(raw.PublicIP)}`);
    if (publicIP.value !== 0n) attrs.publicIP = publicIP; // 0.0.0.0: an IPv6-only node
  }
  if (typeof raw.PublicIPv6 === 'string' && raw.PublicIPv6) {
    const v6 = IP.parse(raw.PublicIPv6);
    if (v6?.family !== 6) throw new Error(`lease field "PublicIPv6" must be an IPv6 address, got ${JSON.stringify(raw.PublicIPv6)}`);
    attrs.publicIPv6 = v6;
  }
  if (!attrs.publicIP && !attrs.publicIPv6) {
    throw new Error(`lease field "PublicIP" must be an IPv4 address (or "PublicIPv6" set on an IPv6-only node), got ${JSON.stringify(raw.PublicIP)}`);
  }
  const v4 = backendData(raw, 'BackendData');
  if (v4.vni !== undefined) attrs.vni = v4.vni;
  if (v4.mac !== undefined) attrs.vtepMAC = v4.mac;
  const v6 = backendData(raw, 'BackendV6Data');
  if (v6.vni !== undefined) attrs.v6Vni = v6.vni;
  if (v6.mac !== undefined) attrs.v6VtepMAC = v6.mac;
  return attrs;
}
