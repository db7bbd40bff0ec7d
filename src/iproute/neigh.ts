// Neighbour (ARP) entries: listing them per device and the permanent entries
// an overlay installs for its peers.
import type { Line } from './batch';
import { ipJson } from './exec';

export interface NeighEntry {
  dst: string;
  lladdr?: string;
  state?: string[];
}

/** IPv4 (or IPv6) neighbour entries on `dev`. */
export async function listNeigh(dev: string, netns?: string, family: 4 | 6 = 4): Promise<NeighEntry[]> {
  return ipJson<NeighEntry[]>([`-${family}`, 'neigh', 'show', 'dev', dev], { netns });
}

export const isPermanent = (n: NeighEntry) => !!n.state?.includes('PERMANENT');

/** `ip` batch lines. */
export const neighReplace = (dst: string, mac: string, dev: string): Line => ['neigh', 'replace', dst, 'lladdr', mac, 'dev', dev, 'nud', 'permanent'];
export const neighDel = (dst: string, dev: string): Line => ['neigh', 'del', dst, 'dev', dev];
