// The overlay's network config (<prefix>/config in etcd), in flannel's schema,
// with flannel's defaults and checks for SubnetLen, SubnetMin and SubnetMax.
import { IP, Prefix } from '../net/ip';

export const DEFAULT_PORT = 8472;
export const DEFAULT_VNI = 1;

export interface NetworkConfig {
  network: Prefix;
  subnetLen: number;
  subnetMin: IP;
  subnetMax: IP;
  vni: number;
  port: number;
  /** Backend.MTU when set; otherwise underlay MTU − 50. */
  mtu?: number;
}

export class ConfigError extends Error {}

const isObject = (v: unknown): v is Record<string, unknown> => !!v && typeof v === 'object' && !Array.isArray(v);

function intField(obj: Record<string, unknown>, key: string, where: string, min: number, max: number): number | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new ConfigError(`network config field "${where}${key}" must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`);
  }
  return v;
}

function ipField(obj: Record<string, unknown>, key: string): IP | undefined {
  const v = obj[key];
  if (v === undefined || v === null || v === '') return undefined;
  const ip = typeof v === 'string' ? IP.parse(v) : undefined;
  if (!ip || ip.family !== 4) throw new ConfigError(`network config field "${key}" must be an IPv4 address, got ${JSON.stringify(v)}`);
  return ip;
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
  if (raw.EnableIPv6 === true || raw.IPv6Network !== undefined) {
    throw new ConfigError('network config: IPv6 overlays (EnableIPv6, IPv6Network) are not supported by vxlan-flannel yet');
  }
  if (raw.EnableIPv4 === false) throw new ConfigError('network config: EnableIPv4 false (IPv6-only) is not supported');
  if (typeof raw.Network !== 'string') throw new ConfigError('network config field "Network" is missing (an IPv4 CIDR such as 10.244.0.0/16)');
  const network = Prefix.parse(raw.Network);
  if (!network || network.family !== 4) throw new ConfigError(`network config field "Network" must be an IPv4 CIDR, got ${JSON.stringify(raw.Network)}`);
  if (network.hasHostBits) throw new ConfigError(`network config field "Network" ${raw.Network} has host bits set (did you mean ${network}?)`);
  const ones = network.length;

  let subnetLen = intField(raw, 'SubnetLen', '', 0, 32) ?? 0;
  if (subnetLen > 0) {
    if (subnetLen > 30) throw new ConfigError('network config field "SubnetLen" must be at most 30 (each node needs room for a gateway and pods)');
    if (subnetLen < ones + 2) throw new ConfigError(`network config: Network ${network} cannot hold four /${subnetLen} subnets (SubnetLen must be at least ${ones + 2})`);
  } else {
    if (ones > 28) throw new ConfigError(`network config: Network ${network} is too small (the smallest useful prefix is /28)`);
    subnetLen = ones <= 22 ? 24 : ones + 2;
  }
  const size = 1n << BigInt(32 - subnetLen);
  const mask = ~(size - 1n) & 0xffffffffn;
  // flannel skips the first subnet (it holds the network address); the last one is used
  let subnetMin = ipField(raw, 'SubnetMin') ?? IP.fromBigInt(4, network.network.value + size);
  let subnetMax = ipField(raw, 'SubnetMax') ?? IP.fromBigInt(4, network.last.value + 1n - size);
  for (const [key, ip] of [['SubnetMin', subnetMin], ['SubnetMax', subnetMax]] as const) {
    if (!network.contains(ip)) throw new ConfigError(`network config field "${key}" ${ip} is not inside Network ${network}`);
    if ((ip.value & mask) !== ip.value) throw new ConfigError(`network config field "${key}" ${ip} is not on a /${subnetLen} boundary`);
  }
  if (subnetMin.value > subnetMax.value) throw new ConfigError(`network config: SubnetMin ${subnetMin} is above SubnetMax ${subnetMax}`);

  let vni = DEFAULT_VNI;
  let port = DEFAULT_PORT;
  let mtu: number | undefined;
  if (raw.Backend !== undefined) {
    if (!isObject(raw.Backend)) throw new ConfigError('network config field "Backend" must be an object');
    const b = raw.Backend;
    if (b.Type !== undefined && b.Type !== 'vxlan') {
      throw new ConfigError(`network config field "Backend.Type" is ${JSON.stringify(b.Type)}: vxlan-flannel only runs the "vxlan" backend`);
    }
    vni = intField(b, 'VNI', 'Backend.', 0, 0xffffff) ?? DEFAULT_VNI;
    const p = intField(b, 'Port', 'Backend.', 0, 65535);
    if (p) port = p; // 0 means the default, as in flannel
    mtu = intField(b, 'MTU', 'Backend.', 68, 65535);
    for (const key of ['GBP', 'DirectRouting', 'Learning']) {
      if (b[key] === true) throw new ConfigError(`network config field "Backend.${key}" is not supported by vxlan-flannel`);
    }
  }
  return { network, subnetLen, subnetMin, subnetMax, vni, port, ...(mtu !== undefined ? { mtu } : {}) };
}

/** The config JSON `network set` writes, in flannel's field names. */
export function formatNetworkConfig(opts: { network: string; subnetLen?: number; vni?: number; port?: number; mtu?: number }): string {
  const backend: Record<string, unknown> = { Type: 'vxlan' };
  if (opts.vni !== undefined) backend.VNI = opts.vni;
  if (opts.port !== undefined) backend.Port = opts.port;
  if (opts.mtu !== undefined) backend.MTU = opts.mtu;
  const obj: Record<string, unknown> = { Network: opts.network };
  if (opts.subnetLen !== undefined) obj.SubnetLen = opts.subnetLen;
  obj.Backend = backend;
  const text = JSON.stringify(obj);
  parseNetworkConfig(text); // refuse to write what the daemon would refuse to read
  return text;
}

/** Every candidate subnet of the pool, as network addresses. */
export function poolSize(cfg: NetworkConfig): bigint {
  return (cfg.subnetMax.value - cfg.subnetMin.value) / (1n << BigInt(32 - cfg.subnetLen)) + 1n;
}

export function nthSubnet(cfg: NetworkConfig, n: bigint): Prefix {
  return Prefix.of(IP.fromBigInt(4, cfg.subnetMin.value + n * (1n << BigInt(32 - cfg.subnetLen))), cfg.subnetLen);
}

/** Whether `subnet` is one this config could hand out. */
export function inPool(cfg: NetworkConfig, subnet: Prefix): boolean {
  return (
    subnet.family === 4 &&
    subnet.length === cfg.subnetLen &&
    !subnet.hasHostBits &&
    subnet.network.value >= cfg.subnetMin.value &&
    subnet.network.value <= cfg.subnetMax.value
  );
}
