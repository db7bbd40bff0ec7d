// `host-local ls`: what is reserved on disk, for operators. Range sets come
// from the network's config in the CNI config directory when one is found.
import * as fs from 'node:fs';
import { join } from 'node:path';
import { parseNetConf, Json } from '../cni/config';
import { parseCniArgs } from '../cni/args';
import { META_DIR, loadIpamConfig } from './config';
import { RangeSet } from './range';
import { NetworkPool } from './network-pool';
import { podToString } from './parking-lot';
import { DEFAULT_LOCK_TIMEOUT_MS } from '../util/lock';
import { formatTable } from '../util/table';
import { describeFailure } from './io-failure';

export interface Listed {
  network: string;
  ip: string;
  containerID: string | null;
  ifname: string | null;
  rangeSet: number | null;
  /** Why rangeSet is null: no config of the network found, or the address is outside its ranges. */
  rangeSetUnknown?: string;
  torn: boolean;
  /** Parked (stickyTTL) for this pod, "namespace/name", until parkedUntil (ISO 8601). */
  parkedFor: string | null;
  parkedUntil: string | null;
}

/**
 * The host-local IPAM a plugin of a network config hands out addresses with:
 * its own `ipam` when that is host-local. `delegated` may name the IPAM of a
 * plugin that renders it for a delegate (flannel's, from subnet.env); it
 * throws when that cannot be read.
 */
export type DelegatedIpam = (plugin: Json, network: string, cniVersion: unknown) => Json | undefined;

/** The host-local range sets of `network` from a config in `confDir`, or why there are none. */
type Found = { sets: RangeSet[]; file: string } | { why: string };

function rangeSetsFromConfDir(confDir: string, network: string, delegated?: DelegatedIpam): Found {
  let files: string[];
  try {
    files = fs.readdirSync(confDir).filter((f) => /\.(conf|conflist|json)$/.test(f)).sort();
  } catch (err) {
    return { why: `cannot read --conf-dir ${confDir}: ${describeFailure(err)}` };
  }
  let found: string | undefined;
  for (const file of files) {
    let top: Json;
    try {
      top = JSON.parse(fs.readFileSync(join(confDir, file), 'utf8')) as Json;
    } catch {
      continue; // not a usable config; keep looking
    }
    if (top.name !== network) continue;
    found ??= file;
    const plugins = Array.isArray(top.plugins) ? (top.plugins as Json[]) : [top];
    for (const p of plugins) {
      try {
        const own = p.ipam as Json | undefined;
        const ipam = own?.type === 'host-local' ? own : delegated?.(p, network, top.cniVersion ?? p.cniVersion);
        if (ipam?.type !== 'host-local') continue;
        const conf = parseNetConf(JSON.stringify({ ...p, ipam, cniVersion: top.cniVersion ?? p.cniVersion, name: network }));
        return { sets: loadIpamConfig(conf, parseCniArgs('')).rangeSets, file: join(confDir, file) };
      } catch (err) {
        return { why: `${join(confDir, file)}: ${(err as Error).message}` };
      }
    }
  }
  if (found) return { why: `${join(confDir, found)} has no host-local IPAM of network ${JSON.stringify(network)}` };
  return { why: `no config in ${confDir} names network ${JSON.stringify(network)} (--conf-dir names the directory)` };
}

export async function listReservations(dataDir: string, confDir: string, only?: string, delegated?: DelegatedIpam): Promise<Listed[]> {
  let networks: string[];
  try {
    networks = fs
      .readdirSync(dataDir, { withFileTypes: true })
      .filter((d) => d.isDirectory() && d.name !== META_DIR && !d.name.startsWith('.'))
      .map((d) => d.name)
      .sort();
  } catch (err) {
    // A typo must not look like "no reservations".
    throw new Error(`cannot list --data-dir ${dataDir}: ${describeFailure(err)}`);
  }
  if (only) networks = networks.filter((n) => n === only);
  const out: Listed[] = [];
  for (const network of networks) {
    const found = rangeSetsFromConfDir(confDir, network, delegated);
    // Listing reads without the lock: no timeout or parking time applies.
    const pool = new NetworkPool({ dataDir, network, lockTimeoutMs: DEFAULT_LOCK_TIMEOUT_MS });
    const rows = pool.reservations().sort((a, b) => a.ip.compare(b.ip));
    for (const r of rows) {
      const rangeSet = 'sets' in found ? (found.sets.find((s) => s.contains(r.ip))?.index ?? null) : null;
      out.push({
        network,
        ip: r.ip.toString(),
        containerID: r.owner?.containerId ?? null,
        ifname: r.owner?.ifname ?? null,
        rangeSet,
        ...(rangeSet === null ? { rangeSetUnknown: 'why' in found ? found.why : `outside the ranges of ${found.file}` } : {}),
        torn: !r.owner,
        parkedFor: r.parking ? podToString(r.parking.pod) : null,
        parkedUntil: r.parking ? new Date(r.parking.expiresAt).toISOString() : null,
      });
    }
  }
  return out;
}

export function formatListing(rows: Listed[]): string {
  const header = ['NETWORK', 'IP', 'CONTAINER', 'IFNAME', 'RANGESET', 'STATE'];
  const table = formatTable(
    header,
    rows.map((r) => [
      r.network,
      r.ip,
      r.containerID ?? '-',
      r.ifname ?? (r.torn ? '-' : '(legacy)'),
      r.rangeSet === null ? '?' : String(r.rangeSet),
      r.torn ? 'TORN (reclaimed by GC)' : r.parkedFor ? `parked for ${r.parkedFor} until ${r.parkedUntil}` : 'reserved',
    ]),
  );
  // each "?" explained once per network and reason, under the table
  const note = (r: Listed) => `RANGESET ? (${r.network}${r.rangeSetUnknown!.startsWith('outside') ? ` ${r.ip}` : ''}): ${r.rangeSetUnknown}`;
  const notes = new Set(rows.filter((r) => r.rangeSetUnknown).map(note));
  return notes.size ? `${table}${[...notes].join('\n')}\n` : table;
}
