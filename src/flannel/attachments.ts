// The flannel CNI plugin's saved delegate configs in its dataDir, as files:
// their names and who they belong to. The plugin writes and replays them
// (plugin/cni.ts); GC, `host-local repair` and the daemon's reclaim of what
// flannel's own plugin left (daemon/leftovers.ts) read them.
import * as fs from 'node:fs';
import { join } from 'node:path';
import { decodeJson, type Json } from '../cni/config';

export const DEFAULT_DATA_DIR = '/var/lib/cni/flannel';

/**
 * An attachment's saved delegate config: `<dataDir>/<network>:<containerID>:<ifname>`.
 * dataDir is shared by every flannel network on the node, and a container can
 * be attached to several of them (or to one twice, by two ifnames): keyed by
 * container alone, as flannel does, the second ADD overwrote the first one's
 * config and its DEL released the wrong address. ':' is in none of the three
 * (CNI's rules for names and container IDs, the kernel's for ifnames).
 *
 * ADD also writes flannel's own `<dataDir>/<containerID>` when it is free, so
 * that flannel's plugin can take the node back and still DEL the container;
 * for us it is a copy, never read while an attachment file of the container
 * exists on this network.
 */
export const savedName = (network: string, containerId: string, ifname: string) => `${network}:${containerId}:${ifname}`;

export function parseSavedName(name: string): { network: string; containerId: string; ifname: string } | undefined {
  const parts = name.split(':');
  return parts.length === 3 && parts.every(Boolean) ? { network: parts[0], containerId: parts[1], ifname: parts[2] } : undefined;
}


/** A saved config of one network: an attachment's, or flannel's per-container copy (no ifname). */
export interface SavedConfig {
  containerId: string;
  ifname?: string;
  file: string;
  mtimeMs: number;
}

/**
 * The saved configs of `network` in `dataDir`, read only (GC judges them,
 * `host-local repair` lists them). dataDir is shared by every flannel network
 * on the node (as in flannel): a per-container copy is the network's when the
 * config inside names it.
 */
export function savedConfigs(dataDir: string, network: string): SavedConfig[] {
  let names: string[] = [];
  try {
    names = fs.readdirSync(dataDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const out: SavedConfig[] = [];
  for (const name of names) {
    if (name.startsWith('.')) continue;
    const file = join(dataDir, name);
    const key = parseSavedName(name);
    let found: Omit<SavedConfig, 'mtimeMs'> | undefined;
    if (key) {
      if (key.network === network) found = { containerId: key.containerId, ifname: key.ifname, file };
    } else {
      let saved: Json | undefined;
      try {
        saved = decodeJson(fs.readFileSync(file, 'utf8'));
      } catch {
        // not a config we can read, so not ours to judge
      }
      if (saved?.name === network) found = { containerId: name, file };
    }
    if (!found) continue;
    try {
      out.push({ ...found, mtimeMs: fs.statSync(file).mtimeMs });
    } catch {
      // removed since the listing
    }
  }
  return out;
}
