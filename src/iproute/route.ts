// Routes: batch lines and the entries of `ip -json route show table all`
// (the one listing that covers both families in a batch: `ip route show`
// alone is IPv4 only, and `-6` cannot be given per batch line).
import { readdirSync, readFileSync } from 'node:fs';
import type { Line } from './batch';
import { ipJson } from './exec';

/** One route as `ip -json route show` prints it. */
export interface IpRoute {
  type?: string;
  dst: string;
  gateway?: string;
  dev?: string;
  /** Absent for the main table. */
  table?: string;
  protocol?: string;
  scope?: string;
  metric?: number;
  prefsrc?: string;
  flags?: string[];
}

export interface RouteSpec {
  dst: string;
  gw?: string;
  /** Absent for a route whose gateway picks the device. */
  dev?: string;
  /** Gateway is on-link even if no address covers it (overlays). */
  onlink?: boolean;
  mtu?: number;
  advmss?: number;
  metric?: number;
  table?: number;
  scope?: number;
  src?: string;
}

function routeArgs(r: RouteSpec): string[] {
  return [
    r.dst,
    ...(r.gw ? ['via', r.gw] : []),
    ...(r.dev ? ['dev', r.dev] : []),
    ...(r.src ? ['src', r.src] : []),
    ...(r.metric !== undefined ? ['metric', String(r.metric)] : []),
    ...(r.table !== undefined ? ['table', String(r.table)] : []),
    ...(r.scope !== undefined ? ['scope', String(r.scope)] : []),
    ...(r.mtu !== undefined ? ['mtu', String(r.mtu)] : []),
    ...(r.advmss !== undefined ? ['advmss', String(r.advmss)] : []),
    ...(r.onlink ? ['onlink'] : []),
  ];
}

/** `route append`: creates, or adds a next hop beside an existing route to the same destination (netlink NLM_F_APPEND). */
export function routeAppend(r: RouteSpec): Line {
  return ['route', 'append', ...routeArgs(r)];
}

/** `route replace`: idempotent create-or-update. */
export function routeReplace(r: RouteSpec): Line {
  return ['route', 'replace', ...routeArgs(r)];
}

export function routeDel(r: RouteSpec): Line {
  return ['route', 'del', ...routeArgs(r)];
}

/**
 * The routes of one family in the main table through `dev` (one exec: `-4`
 * and `-6` cannot be given per batch line).
 */
export async function listRoutes(dev: string, netns?: string, family: 4 | 6 = 4): Promise<IpRoute[]> {
  return ipJson<IpRoute[]>([`-${family}`, 'route', 'show', 'dev', dev], { netns });
}

/** The routes of the main table whose destination lies within `prefix`, on any device (one exec). */
export async function listRoutesWithin(prefix: string, netns?: string, family: 4 | 6 = 4): Promise<IpRoute[]> {
  return ipJson<IpRoute[]>([`-${family}`, 'route', 'show', 'root', prefix], { netns });
}

/** Every route of every table and family (use with json). */
export function routeShowAll(): Line {
  return ['route', 'show', 'table', 'all'];
}

/**
 * The canonical CIDR of an `ip -json route` dst in family `family`:
 * "default" -> 0.0.0.0/0 or ::/0, a bare host -> /32 or /128.
 */
export function routeDstCidr(dst: string, family: 4 | 6): string {
  if (dst === 'default') return family === 4 ? '0.0.0.0/0' : '::/0';
  if (dst.includes('/')) return dst;
  return `${dst}/${family === 4 ? 32 : 128}`;
}

export const MAIN_TABLE = 254;

const TABLE_NAMES: Record<string, number> = { unspec: 0, default: 253, main: 254, local: 255 };
let namedTables: Map<string, number> | undefined;

/** Table names an operator gave in iproute2's rt_tables files, which `ip` prints instead of the number. */
function rtTables(): Map<string, number> {
  if (namedTables) return namedTables;
  namedTables = new Map();
  const files = ['/etc/iproute2/rt_tables', '/usr/share/iproute2/rt_tables', '/usr/lib/iproute2/rt_tables'];
  for (const d of ['/etc/iproute2/rt_tables.d', '/usr/share/iproute2/rt_tables.d']) {
    try {
      files.push(...readdirSync(d).filter((f) => f.endsWith('.conf')).map((f) => `${d}/${f}`));
    } catch {
      // no such directory
    }
  }
  for (const file of files) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n')) {
      const m = /^\s*(0x[0-9a-f]+|\d+)\s+(\S+)/i.exec(line);
      if (m && !namedTables.has(m[2])) namedTables.set(m[2], Number(m[1]));
    }
  }
  return namedTables;
}

/**
 * The number of the table an `ip -json route` entry is in: its `table` is
 * absent for the main table (without -details), a number, or a name.
 */
export function routeTableId(table: string | undefined): number | undefined {
  if (table === undefined) return MAIN_TABLE;
  if (/^\d+$/.test(table)) return Number(table);
  return TABLE_NAMES[table] ?? rtTables().get(table);
}
