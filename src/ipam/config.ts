// host-local configuration: the reference's fields and defaults, and the
// validation it misses. Every error names the field it rejects.
import { isAbsolute, join, resolve } from 'node:path';
import { CniError, ErrorCode, invalidConfig } from '../cni/errors';
import { Json, NetConf, optArray, optInt, optObject, optString } from '../cni/config';
import type { CniArgs } from '../cni/args';
import type { Route } from '../cni/result';
import { atLeast } from '../cni/version';
import { IP, Prefix } from '../net/ip';
import { Range, RangeSet, findOverlap, rangeToString } from './range';
import { DEFAULT_LOCK_TIMEOUT_MS } from '../util/lock';

export const DEFAULT_DATA_DIR = '/var/lib/cni/networks';
/** Our own per-network state sits in <dataDir>/.cni-ts/<network>/: no network's name starts with '.'. */
export const META_DIR = '.cni-ts';

/** Linux's longest file name and path, in bytes (NAME_MAX, PATH_MAX - 1). */
const NAME_MAX = 255;
const PATH_MAX = 4095;
/** The longest name we put under a network's directories (an IPv6 address; index.new/3f). */
const LONGEST_ENTRY = 40;

/** Where a network's state lives, how long to wait for its lock, and how long a deleted pod's addresses stay parked. */
export interface StoreLocation {
  network: string;
  dataDir: string;
  lockTimeoutMs: number;
  /** ipam.stickyTTL; undefined: addresses are freed at DEL. */
  stickyTtlMs?: number;
}

export interface IpamConfig extends StoreLocation {
  rangeSets: RangeSet[];
  routes: Route[];
  resolvConf?: string;
  /** Addresses the runtime asked for, each already matched to its range set. */
  requested: Map<number, IP>;
}

/** What DEL and GC need: it must work even when the ranges are gone or broken. */
export function loadStoreLocation(conf: NetConf): StoreLocation {
  const ipam = optObject(conf, 'ipam');
  if (!ipam) throw invalidConfig('IPAM config missing field "ipam"');
  const network = conf.name;
  const nameBytes = Buffer.byteLength(network);
  if (nameBytes > NAME_MAX) {
    throw invalidConfig(`network name (field "name") is ${nameBytes} bytes; it names a directory, and a file name can have at most ${NAME_MAX}`);
  }
  const dataDir = parseDataDir(ipam);
  const deepest = Buffer.byteLength(join(dataDir, META_DIR, network)) + LONGEST_ENTRY;
  if (deepest > PATH_MAX) {
    throw invalidConfig(`field "ipam.dataDir" is too long: paths under it for network ${network} would be ${deepest} bytes (at most ${PATH_MAX})`);
  }
  return {
    network,
    dataDir,
    lockTimeoutMs: optInt(ipam, 'lockTimeoutMs', 0, 3_600_000, 'ipam.') ?? DEFAULT_LOCK_TIMEOUT_MS,
    stickyTtlMs: parseDuration(ipam, 'stickyTTL'),
  };
}

const UNIT_MS: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000 };
/** A year: a longer parking is surely a typo. */
const MAX_STICKY_MS = 366 * 24 * 3_600_000;

/** "30s", "15m", "24h", "1h30m": whole numbers of hours, minutes and seconds, as Go writes durations. */
function parseDuration(ipam: Json, key: string): number | undefined {
  const text = optString(ipam, key, 'ipam.');
  if (text === undefined) return undefined;
  const bad = () => invalidConfig(`field "ipam.${key}" must be a duration such as "30s", "15m", "24h" or "1h30m" (up to 8784h), got ${JSON.stringify(text)}`);
  if (!/^(\d+[hms])+$/.test(text)) throw bad();
  let ms = 0;
  for (const [, n, unit] of text.matchAll(/(\d+)([hms])/g)) ms += Number(n) * UNIT_MS[unit];
  if (ms <= 0 || ms > MAX_STICKY_MS) throw bad();
  return ms;
}

function parseDataDir(ipam: Json): string {
  const dir = optString(ipam, 'dataDir', 'ipam.') || DEFAULT_DATA_DIR;
  if (!isAbsolute(dir)) throw invalidConfig(`field "ipam.dataDir" must be an absolute path, got ${JSON.stringify(dir)}`);
  if (dir.includes('\0')) throw invalidConfig('field "ipam.dataDir" contains a NUL byte');
  const long = dir.split('/').find((part) => Buffer.byteLength(part) > NAME_MAX);
  if (long) throw invalidConfig(`field "ipam.dataDir" has a component longer than ${NAME_MAX} bytes (${long.slice(0, 20)}...)`);
  return resolve(dir);
}

export function loadIpamConfig(conf: NetConf, args: CniArgs): IpamConfig {
  const location = loadStoreLocation(conf);
  const ipam = conf.ipam as Json;

  const rawSets: { raw: unknown; where: string }[] = [];
  const runtime = optObject(conf, 'runtimeConfig') ?? {};
  (optArray(runtime, 'ipRanges', 'runtimeConfig.') ?? []).forEach((raw, i) =>
    rawSets.push({ raw, where: `runtimeConfig.ipRanges[${i}]` }),
  );
  if (ipam.subnet !== undefined) rawSets.push({ raw: [ipam], where: 'ipam' });
  (optArray(ipam, 'ranges', 'ipam.') ?? []).forEach((raw, i) => rawSets.push({ raw, where: `ipam.ranges[${i}]` }));
  if (rawSets.length === 0) throw invalidConfig('no IP ranges specified: set "ipam.ranges" (or "ipam.subnet")');

  const rangeSets = rawSets.map(({ raw, where }, i) => parseRangeSet(raw, where, i));
  checkSetsDisjoint(rangeSets, rawSets.map((s) => s.where));

  const perFamily = (f: number) => rangeSets.filter((s) => s.family === f).length;
  if ((perFamily(4) > 1 || perFamily(6) > 1) && !atLeast(conf.cniVersion, '0.3.0')) {
    throw invalidConfig(`cniVersion ${conf.cniVersion} allows only one address per family, but ranges has several range sets of one family`);
  }

  return {
    ...location,
    rangeSets,
    routes: parseRoutes(ipam),
    resolvConf: optString(ipam, 'resolvConf', 'ipam.') || undefined,
    requested: matchRequested(requestedIPs(conf, args), rangeSets),
  };
}

function parseRangeSet(raw: unknown, where: string, index: number): RangeSet {
  if (!Array.isArray(raw)) throw invalidConfig(`field "${where}" must be a list of ranges`);
  if (raw.length === 0) throw invalidConfig(`field "${where}" is an empty range set`);
  const ranges = raw.map((r, i) => parseRange(r, where === 'ipam' ? 'ipam' : `${where}[${i}]`));
  const fam = ranges[0].subnet.family;
  ranges.forEach((r, i) => {
    if (r.subnet.family !== fam) throw invalidConfig(`field "${where}" mixes IPv4 and IPv6 ranges (range ${i})`);
  });
  const overlap = findOverlap(ranges);
  if (overlap) {
    const [i, j] = overlap;
    throw invalidConfig(`field "${where}": ranges ${rangeToString(ranges[i])} and ${rangeToString(ranges[j])} overlap`);
  }
  return new RangeSet(ranges, index);
}

function parseRange(raw: unknown, where: string): Range {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw invalidConfig(`field "${where}" must be an object`);
  const r = raw as Json;
  const subnetText = optString(r, 'subnet', `${where}.`);
  if (!subnetText) throw invalidConfig(`field "${where}.subnet" is required`);
  const subnet = Prefix.parse(subnetText);
  if (!subnet) throw invalidConfig(`field "${where}.subnet" ${JSON.stringify(subnetText)} is not a CIDR prefix`);
  if (subnet.length > subnet.address.bits - 2) {
    throw invalidConfig(`field "${where}.subnet" ${subnetText} is too small to allocate from (the prefix must be /${subnet.address.bits - 2} or shorter)`);
  }
  if (subnet.hasHostBits) {
    throw invalidConfig(`field "${where}.subnet" ${subnetText} has host bits set: the network address is ${subnet.toString()}`);
  }
  const network = subnet.network;
  // IPv4 never hands out the broadcast address; IPv6 has none.
  const lastUsable = subnet.family === 4 ? subnet.last.prev() : subnet.last;
  const addressIn = (key: string): IP | undefined => {
    const text = optString(r, key, `${where}.`);
    if (!text) return undefined;
    const ip = IP.parse(text);
    if (!ip) throw invalidConfig(`field "${where}.${key}" ${JSON.stringify(text)} is not an IP address`);
    if (!subnet.contains(ip)) throw invalidConfig(`field "${where}.${key}" ${ip} is not in subnet ${subnet}`);
    if (ip.equals(network)) throw invalidConfig(`field "${where}.${key}" ${ip} is the network address of ${subnet}`);
    if (subnet.family === 4 && ip.equals(subnet.last)) {
      throw invalidConfig(`field "${where}.${key}" ${ip} is the broadcast address of ${subnet}`);
    }
    return ip;
  };
  const gateway = addressIn('gateway') ?? network.next();
  const start = addressIn('rangeStart') ?? network.next();
  const end = addressIn('rangeEnd') ?? lastUsable;
  if (start.compare(end) > 0) {
    throw invalidConfig(`field "${where}.rangeStart" ${start} is after "${where}.rangeEnd" ${end}`);
  }
  return { subnet, start, end, gateway };
}

/** Sets whose ranges overlap: all ranges at once (a set's own are disjoint already), n log n. */
function checkSetsDisjoint(sets: RangeSet[], wheres: string[]): void {
  const all = sets.flatMap((set, i) => set.ranges.map((range) => ({ range, set: i })));
  const overlap = findOverlap(all.map((r) => r.range));
  if (overlap) {
    const [a, b] = overlap.map((k) => all[k].set);
    throw invalidConfig(`range sets "${wheres[a]}" and "${wheres[b]}" overlap`);
  }
}

function parseRoutes(ipam: Json): Route[] {
  return (optArray(ipam, 'routes', 'ipam.') ?? []).map((raw, i) => {
    const where = `ipam.routes[${i}]`;
    if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw invalidConfig(`field "${where}" must be an object`);
    const route = raw as Json;
    const dst = optString(route, 'dst', `${where}.`);
    const prefix = dst ? Prefix.parse(dst) : undefined;
    if (!prefix) throw invalidConfig(`field "${where}.dst" must be a CIDR prefix, got ${JSON.stringify(dst)}`);
    const gw = optString(route, 'gw', `${where}.`);
    if (gw !== undefined) {
      const ip = IP.parse(gw);
      if (!ip) throw invalidConfig(`field "${where}.gw" ${JSON.stringify(gw)} is not an IP address`);
      if (ip.family !== prefix.family) throw invalidConfig(`field "${where}.gw" ${gw} is not of the family of dst ${dst}`);
    }
    return route as unknown as Route;
  });
}

/**
 * Addresses asked for by the runtime: runtimeConfig.ips (the "ips" capability)
 * plus either the config's args.cni.ips or, failing that, CNI_ARGS IP
 * (config args win over CNI_ARGS). "10.1.0.5" and "10.1.0.5/24" are both accepted.
 */
function requestedIPs(conf: NetConf, args: CniArgs): { ip: IP; where: string }[] {
  const out: { ip: IP; where: string }[] = [];
  const add = (text: unknown, where: string, code: number = ErrorCode.InvalidNetworkConfig) => {
    const s = typeof text === 'string' ? text.replace(/\/\d+$/, '') : undefined;
    const ip = s === undefined ? undefined : IP.parse(s);
    if (!ip) throw new CniError(code, `${where}: ${JSON.stringify(text)} is not an IP address`);
    out.push({ ip, where });
  };
  const runtime = optObject(conf, 'runtimeConfig') ?? {};
  (optArray(runtime, 'ips', 'runtimeConfig.') ?? []).forEach((t, i) => add(t, `runtimeConfig.ips[${i}]`));
  const cniArgs = optObject(optObject(conf, 'args') ?? {}, 'cni', 'args.');
  const configIps = cniArgs ? optArray(cniArgs, 'ips', 'args.cni.') : undefined;
  if (configIps?.length) configIps.forEach((t, i) => add(t, `args.cni.ips[${i}]`));
  else {
    const env = args.get('IP');
    if (env) env.split(',').forEach((t) => add(t.trim(), 'CNI_ARGS IP', ErrorCode.InvalidEnvironment));
  }
  return out;
}

/** Each requested address must fall in exactly one range set, at most one per set. */
function matchRequested(reqs: { ip: IP; where: string }[], sets: RangeSet[]): Map<number, IP> {
  const bySet = new Map<number, IP>();
  for (const { ip, where } of reqs) {
    const set = sets.find((s) => s.contains(ip));
    if (!set) {
      throw new CniError(
        ErrorCode.InvalidNetworkConfig,
        `${where}: requested IP ${ip} is not in any range (${sets.map((s) => s.toString()).join('; ')})`,
      );
    }
    const earlier = bySet.get(set.index);
    if (earlier && !earlier.equals(ip)) {
      throw new CniError(ErrorCode.InvalidNetworkConfig, `${where}: requested IPs ${earlier} and ${ip} are both in range set ${set}`);
    }
    if (set.rangeFor(ip)!.gateway.equals(ip)) {
      throw new CniError(ErrorCode.InvalidNetworkConfig, `${where}: requested IP ${ip} is the gateway of range set ${set}`);
    }
    bySet.set(set.index, ip);
  }
  return bySet;
}
