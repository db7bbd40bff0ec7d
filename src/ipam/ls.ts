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
  torn: boolean;
  /** Parked (stickyTTL) for this pod, "namespace/name", until parkedUntil (ISO 8601). */
  parkedFor: string | null;
  parkedUntil: string | null;
}

/** The host-local range sets of `network` from a config in `confDir`, if one is there. */
function rangeSetsFromConfDir(confDir: string, network: string): RangeSet[] | undefined {
  let files: string[];
  try {
    files = fs.readdirSync(confDir).filter((f) => /\.(conf|conflist|json)$/.test(f)).sort();
  } catch {
    return undefined;
  }
  for (const file of files) {
    try {
      const top = JSON.parse(fs.readFileSync(join(confDir, file), 'utf8')) as Json;
      if (top.name !== network) continue;
      const plugins = Array.isArray(top.plugins) ? (top.plugins as Json[]) : [top];
      for (const p of plugins) {
        const ipam = p.ipam as Json | undefined;
        if (ipam?.type !== 'host-local') continue;
        const conf = parseNetConf(JSON.stringify({ ...p, cniVersion: top.cniVersion ?? p.cniVersion, name: network }));
        return loadIpamConfig(conf, parseCniArgs('')).rangeSets;
      }
    } catch {
      // not a usable config; keep looking
    }
  }
  return undefined;
}

export async function listReservations(dataDir: string, confDir: string, only?: string): Promise<Listed[]> {
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
    const sets = rangeSetsFromConfDir(confDir, network);
    // Listing reads without the lock: no timeout or parking time applies.
    const pool = new NetworkPool({ dataDir, network, lockTimeoutMs: DEFAULT_LOCK_TIMEOUT_MS });
    const rows = pool.reservations().sort((a, b) => a.ip.compare(b.ip));
    for (const r of rows) {
      out.push({
        network,
        ip: r.ip.toString(),
        containerID: r.owner?.containerId ?? null,
        ifname: r.owner?.ifname ?? null,
        rangeSet: sets?.find((s) => s.contains(r.ip))?.index ?? null,
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
  return formatTable(
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
}
