// The overlay's network config (<prefix>/config in etcd), in flannel's schema,
// with flannel's defaults and checks for SubnetLen, SubnetMin and SubnetMax and
// their IPv6 counterparts (EnableIPv6, IPv6Network, IPv6SubnetLen,
// IPv6SubnetMin, IPv6SubnetMax; EnableIPv4 false for an IPv6-only overlay),
// EnableNFTables, Backend.Type (vxlan or host-gw), and the vxlan backend's
// VNI, Port, MTU, DirectRouting, GBP and Learning (host-gw has no settings). Field names match as Go's encoding/json matches them: the
// exact name first, else any spelling in another case ("mtu", "directRouting").
import { Family, IP, Prefix } from '../net/ip';

const DEFAULT_PORT = 8472;
const DEFAULT_VNI = 1;

/** VXLAN over IPv4 costs 50 bytes (outer IPv4 20, UDP 8, VXLAN 8, inner Ethernet 14); over IPv6, 70. */
export const ENCAP_OVERHEAD = { 4: 50, 6: 70 } as const;
/** The smallest MTU of each family (IPv6 needs 1280). */
export const MIN_MTU = { 4: 68, 6: 1280 } as const;

/** One family's subnet pool: the overlay network and the node subnets it is cut into. */
export interface Pool {
  network: Prefix;
  subnetLen: number;
  subnetMin: IP;
  subnetMax: IP;
}

/** The backends vxlan-flannel runs (Backend.Type): flannel's names. */
export const BACKEND_TYPES = ['vxlan', 'host-gw'] as const;
export type BackendType = (typeof BACKEND_TYPES)[number];

export interface NetworkConfig {
  /** Backend.Type. */
  backend: BackendType;
  /** IPv4 (Network, SubnetLen, ...); undefined when EnableIPv4 is false. */
  v4?: Pool;
  /** IPv6 (IPv6Network, IPv6SubnetLen, ...); undefined unless EnableIPv6. */
  v6?: Pool;
  vni: number;
  port: number;
  /**
   * Backend.MTU: the underlay's MTU, as flannel reads it (the VTEPs get it
   * less the encapsulation); absent, the underlay interface's own.
   */
  mtu?: number;
  /** Backend.DirectRouting: peers on a directly connected underlay subnet are routed via their public address, not over VXLAN. */
  directRouting: boolean;
  /** Backend.GBP: the VTEPs carry the VXLAN Group Policy extension. */
  gbp: boolean;
  /** Backend.Learning: the VTEPs learn remote MACs (the FDB entries are programmed all the same). */
  learning: boolean;
  /** EnableNFTables: flanneld's masquerade and forward rules in nftables instead of iptables. */
  nftables: boolean;
}

export class ConfigError extends Error {}

const isObject = (v: unknown): v is Record<string, unknown> => !!v && typeof v === 'object' && !Array.isArray(v);

/** `obj[key]` as Go's encoding/json finds it: the exact name, else the last key equal to it in another case. */
function field(obj: Record<string, unknown>, key: string): unknown {
  if (key in obj) return obj[key];
  const lower = key.toLowerCase();
  const match = Object.keys(obj).filter((k) => k.toLowerCase() === lower).pop();
  return match === undefined ? undefined : obj[match];
}

function intField(obj: Record<string, unknown>, key: string, where: string, min: number, max: number): number | undefined {
  const v = field(obj, key);
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new ConfigError(`network config field "${where}${key}" must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`);
  }
  return v;
}

function boolField(obj: Record<string, unknown>, key: string, where = ''): boolean | undefined {
  const v = field(obj, key);
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw new ConfigError(`network config field "${where}${key}" must be true or false, got ${JSON.stringify(v)}`);
  return v;
}

function ipField(obj: Record<string, unknown>, key: string, family: Family): IP | undefined {
  const v = field(obj, key);
  if (v === undefined || v === null || v === '') return undefined;
  const ip = typeof v === 'string' ? IP.parse(v) : undefined;
  if (!ip || ip.family !== family) throw new ConfigError(`network config field "${key}" must be an IPv${family} address, got ${JSON.stringify(v)}`);
  return ip;
}

export const subnetSize = (family: Family, len: number) => 1n << BigInt((family === 4 ? 32 : 128) - len);

/** Min and max of a pool: flannel's defaults (skip the first subnet, use the last), or checked explicit values. */
function bounds(raw: Record<string, unknown>, network: Prefix, subnetLen: number, keys: [string, string]): [IP, IP] {
  const family = network.family;
  const size = subnetSize(family, subnetLen);
  const subnetMin = ipField(raw, keys[0], family) ?? IP.fromBigInt(family, network.network.value + size);
  const subnetMax = ipField(raw, keys[1], family) ?? IP.fromBigInt(family, network.last.value + 1n - size);
  for (const [key, ip] of [[keys[0], subnetMin], [keys[1], subnetMax]] as const) {
    if (!network.contains(ip)) throw new ConfigError(`network config field "${key}" ${ip} is not inside ${family === 4 ? 'Network' : 'IPv6Network'} ${network}`);
    if (ip.value % size !== 0n) throw new ConfigError(`network config field "${key}" ${ip} is not on a /${subnetLen} boundary`);
  }
  if (subnetMin.value > subnetMax.value) throw new ConfigError(`network config: ${keys[0]} ${subnetMin} is above ${keys[1]} ${subnetMax}`);
  return [subnetMin, subnetMax];
}

/** The config fields of one family's pool, and flannel's defaults for it. */
interface PoolFields {
  family: 4 | 6;
  network: string;
  subnetLen: string;
  bounds: [string, string];
  /** What to write when `network` is missing. */
  hint: string;
  /** flannel's per-node prefix when SubnetLen is not set (and the network is large enough). */
  defaultLen: number;
}

const V4_FIELDS: PoolFields = {
  family: 4,
  network: 'Network',
  subnetLen: 'SubnetLen',
  bounds: ['SubnetMin', 'SubnetMax'],
  hint: 'an IPv4 CIDR such as 10.244.0.0/16',
  defaultLen: 24,
};
const V6_FIELDS: PoolFields = {
  family: 6,
  network: 'IPv6Network',
  subnetLen: 'IPv6SubnetLen',
  bounds: ['IPv6SubnetMin', 'IPv6SubnetMax'],
  hint: 'EnableIPv6 is true; an IPv6 CIDR such as fd00:10:244::/56',
  defaultLen: 64,
};

/** One family's pool: the network, the per-node prefix length and the bounds, as flannel reads them. */
function parsePool(raw: Record<string, unknown>, f: PoolFields): Pool {
  const text = field(raw, f.network);
  if (typeof text !== 'string') {
    const list = `${f.network}s`;
    const gone = `; "${list}", flannel's list of networks before v0.25, is not read (nor by flanneld v0.28.9)`;
    const old = field(raw, list) === undefined ? '' : gone;
    throw new ConfigError(`network config field "${f.network}" is missing (${f.hint})${old}`);
  }
  const network = Prefix.parse(text);
  if (!network || network.family !== f.family) {
    throw new ConfigError(`network config field "${f.network}" must be an IPv${f.family} CIDR, got ${JSON.stringify(text)}`);
  }
  if (network.hasHostBits) throw new ConfigError(`network config field "${f.network}" ${text} has host bits set (did you mean ${network}?)`);
  const bits = network.address.bits;
  const ones = network.length;
  let subnetLen = intField(raw, f.subnetLen, '', 0, bits) ?? 0;
  if (subnetLen > 0) {
    if (subnetLen > bits - 2) {
      throw new ConfigError(`network config field "${f.subnetLen}" must be at most ${bits - 2} (each node needs room for a gateway and pods)`);
    }
    if (subnetLen < ones + 2) {
      throw new ConfigError(`network config: ${f.network} ${network} cannot hold four /${subnetLen} subnets (${f.subnetLen} must be at least ${ones + 2})`);
    }
  } else {
    if (ones > bits - 4) throw new ConfigError(`network config: ${f.network} ${network} is too small (the smallest useful prefix is /${bits - 4})`);
    subnetLen = ones <= f.defaultLen - 2 ? f.defaultLen : ones + 2;
  }
  // flannel skips the first subnet (it holds the network address); the last one is used
  const [subnetMin, subnetMax] = bounds(raw, network, subnetLen, f.bounds);
  return { network, subnetLen, subnetMin, subnetMax };
}

/** Parses and checks flannel's network config JSON text, filling in flannel's defaults. */
export function parseNetworkConfig(text: string): NetworkConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new ConfigError(`network config is not JSON: ${(err as Error).message}`);
  }
  if (!isObject(raw)) throw new ConfigError('network config must be a JSON object');
  const enableIPv4 = boolField(raw, 'EnableIPv4') ?? true; // flannel's default
  const enableIPv6 = boolField(raw, 'EnableIPv6') ?? false;
  if (!enableIPv4 && !enableIPv6) throw new ConfigError('network config: EnableIPv4 and EnableIPv6 are both false: no overlay to run');
  // "Networks"/"IPv6Networks" (flannel's lists of networks, gone since v0.25) are not read, as flanneld v0.28.9
  // does not read them: a config that still carries them beside "Network" works as with it (parsePool names them when alone)
  // As flanneld: IPv6Network without EnableIPv6 (and Network with EnableIPv4 false) is not used, nor checked.
  const v4 = enableIPv4 ? parsePool(raw, V4_FIELDS) : undefined;
  const v6 = enableIPv6 ? parsePool(raw, V6_FIELDS) : undefined;

  // No Backend is flannel's "udp" backend, and a Backend without Type is an error
  // to flanneld: a cluster configured so does not run vxlan, whatever we would guess.
  const backend = field(raw, 'Backend');
  if (backend === undefined || backend === null) {
    throw new ConfigError(
      'network config field "Backend" is missing: flannel then runs its "udp" backend; vxlan-flannel needs "Backend": {"Type": "vxlan"} (Backend.Type must be vxlan or host-gw)',
    );
  }
  if (!isObject(backend)) throw new ConfigError('network config field "Backend" must be an object with "Type": "vxlan" or "host-gw"');
  const type = field(backend, 'Type');
  if (type === undefined || type === null || type === '') {
    throw new ConfigError('network config field "Backend.Type" is missing (Backend.Type must be vxlan or host-gw)');
  }
  if (!(BACKEND_TYPES as readonly unknown[]).includes(type)) {
    throw new ConfigError(`network config field "Backend.Type" is ${JSON.stringify(type)}: vxlan-flannel runs the "vxlan" and "host-gw" backends (Backend.Type must be vxlan or host-gw)`);
  }
  const vni = intField(backend, 'VNI', 'Backend.', 0, 0xffffff) ?? DEFAULT_VNI;
  const port = intField(backend, 'Port', 'Backend.', 0, 65535) || DEFAULT_PORT; // 0 means the default, as in flannel
  // Backend.MTU is the underlay's: every enabled family's VTEP (MTU less its encapsulation) must reach its minimum.
  const families = [...(v4 ? [4] : []), ...(v6 ? [6] : [])] as (4 | 6)[];
  const mtu = intField(backend, 'MTU', 'Backend.', Math.max(...families.map((f) => MIN_MTU[f] + ENCAP_OVERHEAD[f])), 65535);
  const flag = (key: string) => boolField(backend, key, 'Backend.') ?? false;
  return {
    backend: type as BackendType,
    ...(v4 ? { v4 } : {}),
    ...(v6 ? { v6 } : {}),
    vni,
    port,
    ...(mtu !== undefined ? { mtu } : {}),
    directRouting: flag('DirectRouting'),
    gbp: flag('GBP'),
    learning: flag('Learning'),
    nftables: boolField(raw, 'EnableNFTables') ?? false,
  };
}

export interface NetworkConfigOptions {
  /** Backend.Type (default vxlan). */
  backend?: BackendType;
  /** IPv4 overlay; absent with ipv4 false. */
  network?: string;
  subnetLen?: number;
  /** The first and last subnet handed out (flannel's SubnetMin/SubnetMax): the rest of the network stays free. */
  subnetMin?: string;
  subnetMax?: string;
  /** false: IPv6-only (EnableIPv4 false). */
  ipv4?: boolean;
  ipv6Network?: string;
  ipv6SubnetLen?: number;
  ipv6SubnetMin?: string;
  ipv6SubnetMax?: string;
  vni?: number;
  port?: number;
  /** Backend.MTU: the underlay's MTU. */
  mtu?: number;
  directRouting?: boolean;
  gbp?: boolean;
  learning?: boolean;
  /** EnableNFTables. */
  nftables?: boolean;
}

/** ipv6SubnetMin → ipv6-subnet-min: the option's flag, for messages. */
const flag = (key: string) => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/** The config JSON `network set` writes, in flannel's field names. */
export function formatNetworkConfig(opts: NetworkConfigOptions): string {
  const backend: Record<string, unknown> = { Type: opts.backend ?? 'vxlan' };
  if (opts.backend === 'host-gw') {
    // host-gw has no settings: refuse the vxlan ones rather than write what nothing reads
    const vx = (['vni', 'port', 'mtu', 'directRouting', 'gbp', 'learning'] as const).find((k) => opts[k] !== undefined && opts[k] !== false);
    if (vx) throw new ConfigError(`--${flag(vx)} is a vxlan setting: host-gw has none (its MTU is the interface's)`);
  }
  if (opts.vni !== undefined) backend.VNI = opts.vni;
  if (opts.port !== undefined) backend.Port = opts.port;
  if (opts.mtu !== undefined) backend.MTU = opts.mtu;
  if (opts.directRouting) backend.DirectRouting = true;
  if (opts.gbp) backend.GBP = true;
  if (opts.learning) backend.Learning = true;
  const obj: Record<string, unknown> = {};
  if (opts.ipv4 === false) {
    obj.EnableIPv4 = false;
    const v4 = (['subnetLen', 'subnetMin', 'subnetMax'] as const).find((k) => opts[k] !== undefined);
    if (v4) throw new ConfigError(`--${flag(v4)} is for the IPv4 overlay, which --ipv6-only turns off`);
  } else {
    if (opts.network === undefined) throw new ConfigError('--network is required (unless the overlay is IPv6-only)');
    obj.Network = opts.network;
    if (opts.subnetLen !== undefined) obj.SubnetLen = opts.subnetLen;
    if (opts.subnetMin !== undefined) obj.SubnetMin = opts.subnetMin;
    if (opts.subnetMax !== undefined) obj.SubnetMax = opts.subnetMax;
  }
  if (opts.ipv6Network !== undefined) {
    obj.EnableIPv6 = true;
    obj.IPv6Network = opts.ipv6Network;
    if (opts.ipv6SubnetLen !== undefined) obj.IPv6SubnetLen = opts.ipv6SubnetLen;
    if (opts.ipv6SubnetMin !== undefined) obj.IPv6SubnetMin = opts.ipv6SubnetMin;
    if (opts.ipv6SubnetMax !== undefined) obj.IPv6SubnetMax = opts.ipv6SubnetMax;
  } else {
    const v6 = (['ipv6SubnetLen', 'ipv6SubnetMin', 'ipv6SubnetMax'] as const).find((k) => opts[k] !== undefined);
    if (v6) throw new ConfigError(`--${flag(v6)} needs --ipv6-network`);
  }
  if (opts.nftables) obj.EnableNFTables = true;
  obj.Backend = backend;
  const text = JSON.stringify(obj);
  parseNetworkConfig(text); // refuse to write what the daemon would refuse to read
  return text;
}

const poolStep = (pool: Pool) => subnetSize(pool.network.family, pool.subnetLen);

/** How many subnets the pool holds. */
export function poolSize(pool: Pool): bigint {
  return (pool.subnetMax.value - pool.subnetMin.value) / poolStep(pool) + 1n;
}

/** The pool's n-th subnet (from 0). */
export function nthSubnet(pool: Pool, n: bigint): Prefix {
  return Prefix.of(IP.fromBigInt(pool.network.family, pool.subnetMin.value + n * poolStep(pool)), pool.subnetLen);
}

/** Whether `subnet` is one this pool could hand out. */
export function inPool(pool: Pool, subnet: Prefix): boolean {
  return (
    subnet.family === pool.network.family &&
    subnet.length === pool.subnetLen &&
    !subnet.hasHostBits &&
    subnet.network.value >= pool.subnetMin.value &&
    subnet.network.value <= pool.subnetMax.value
  );
}

/** For log lines: "10.244.0.0/16 (/24 per node) + fd00:10:244::/56 (/64 per node)". */
export function describeNetwork(cfg: NetworkConfig): string {
  return [cfg.v4, cfg.v6]
    .filter((p): p is Pool => !!p)
    .map((p) => `${p.network}, subnets /${p.subnetLen} from ${p.subnetMin} to ${p.subnetMax}`)
    .join('; ');
}
