// Results: one internal shape (the 1.x one) and its conversion to and from
// every spec version, the way libcni's types/020, 040 and 100 convert.
import { CniError, ErrorCode } from './errors';
import { atLeast } from './version';
import type { Json } from './config';

export interface Interface {
  name: string;
  mac?: string;
  mtu?: number;
  sandbox?: string;
  socketPath?: string;
  pciID?: string;
}

export interface IPConfig {
  /** Address with prefix length, e.g. "10.1.0.5/24". */
  address: string;
  gateway?: string;
  /** Index into `interfaces`. */
  interface?: number;
}

export interface Route {
  dst: string;
  gw?: string;
  mtu?: number;
  advmss?: number;
  priority?: number;
  table?: number;
  scope?: number;
}

export interface DNS {
  nameservers?: string[];
  domain?: string;
  search?: string[];
  options?: string[];
}

export interface Result {
  interfaces?: Interface[];
  ips?: IPConfig[];
  routes?: Route[];
  dns?: DNS;
}

const familyOf = (addr: string) => (addr.includes(':') ? '6' : '4');

function dnsIsEmpty(dns: DNS | undefined): boolean {
  return !dns || Object.values(dns).every((v) => v === undefined || (Array.isArray(v) && v.length === 0) || v === '');
}

/** Renders a result as the JSON object of `cniVersion`. */
export function formatResult(result: Result, cniVersion: string): Json {
  if (!atLeast(cniVersion, '0.3.0')) return formatLegacy(result, cniVersion);
  const out: Json = { cniVersion };
  const legacyIps = !atLeast(cniVersion, '1.0.0');
  if (result.interfaces?.length) out.interfaces = result.interfaces;
  if (result.ips?.length) {
    out.ips = result.ips.map((ip) => (legacyIps ? { version: familyOf(ip.address), ...ip } : ip));
  }
  if (result.routes?.length) out.routes = result.routes;
  out.dns = result.dns ?? {};
  return out;
}

/** 0.1.0/0.2.0: the first address of each family, routes split by family. */
function formatLegacy(result: Result, cniVersion: string): Json {
  const out: Json = { cniVersion };
  const slots: Record<'4' | '6', Json | undefined> = { '4': undefined, '6': undefined };
  for (const ip of result.ips ?? []) {
    const fam = familyOf(ip.address);
    if (!slots[fam]) slots[fam] = { ip: ip.address, ...(ip.gateway ? { gateway: ip.gateway } : {}) };
  }
  if (!slots['4'] && !slots['6']) {
    throw new CniError(ErrorCode.IncompatibleVersion, `cannot express this result in cniVersion ${cniVersion}: it has no IP address`);
  }
  for (const route of result.routes ?? []) {
    const slot = slots[familyOf(route.dst)];
    if (!slot) continue;
    const routes = ((slot.routes as Json[] | undefined) ??= []);
    routes.push(route.gw ? { dst: route.dst, gw: route.gw } : { dst: route.dst });
  }
  if (slots['4']) out.ip4 = slots['4'];
  if (slots['6']) out.ip6 = slots['6'];
  if (!dnsIsEmpty(result.dns)) out.dns = result.dns;
  return out;
}

/** Reads a result of any version (a prevResult, a delegate's output) into the internal shape. */
export function parseResult(raw: unknown): Result {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new CniError(ErrorCode.DecodingFailure, 'result must be a JSON object');
  }
  const obj = raw as Json;
  const result: Result = {};
  if (obj.ip4 !== undefined || obj.ip6 !== undefined) {
    result.ips = [];
    result.routes = [];
    for (const key of ['ip4', 'ip6'] as const) {
      const slot = obj[key] as Json | undefined;
      if (!slot) continue;
      if (typeof slot.ip !== 'string') throw new CniError(ErrorCode.DecodingFailure, `result field "${key}.ip" must be a string`);
      result.ips.push({ address: slot.ip, ...(typeof slot.gateway === 'string' ? { gateway: slot.gateway } : {}) });
      for (const r of (slot.routes as Route[] | undefined) ?? []) result.routes.push(r);
    }
  } else {
    if (obj.interfaces !== undefined) result.interfaces = arrayField<Interface>(obj, 'interfaces');
    if (obj.ips !== undefined) {
      result.ips = arrayField<IPConfig & { version?: string }>(obj, 'ips').map(({ version: _v, ...ip }) => {
        if (typeof ip.address !== 'string') throw new CniError(ErrorCode.DecodingFailure, 'result field "ips[].address" must be a string');
        return ip;
      });
    }
    if (obj.routes !== undefined) result.routes = arrayField<Route>(obj, 'routes');
  }
  if (obj.dns && typeof obj.dns === 'object') result.dns = obj.dns as DNS;
  return result;
}

function arrayField<T>(obj: Json, key: string): T[] {
  const v = obj[key];
  if (v === null) return [];
  if (!Array.isArray(v)) throw new CniError(ErrorCode.DecodingFailure, `result field "${key}" must be a list`);
  return v as T[];
}
