// What flannel's own CNI plugin leaves of an attachment our plugin ADDed.
// Its DEL reads <dataDir>/<containerID> (the copy our ADD writes for it),
// runs the delegate's DEL with it (the veth and the address go), removes that
// file, and knows nothing of our attachment file
// <dataDir>/<network>:<containerID>:<ifname>, which stays. The daemon removes
// such a file on its periodic passes once all of these hold:
// - flannel's <containerID> file of the container is gone (our own DEL
//   removes the attachment file first, and never leaves it without reason);
// - the file is older than RECLAIM_AFTER_MS (an ADD in progress writes it
//   before its delegate reserves an address);
// - host-local's store no longer holds an address for the attachment (the
//   delegate's DEL released it).
// Any doubt (another IPAM, host-local's directory unreadable) keeps the file:
// the runtime's CNI GC and `host-local repair` still judge it.
import * as fs from 'node:fs';
import { join } from 'node:path';
import { validateNetworkName } from '../../cni/config';
import { removeFile } from '../../util/fs';
import { parseOwner } from '../../ipam/disk-store';
import { DEFAULT_DATA_DIR as DEFAULT_IPAM_DIR } from '../../ipam/config';
import { IP } from '../../net/ip';
import { parseSavedName } from '../attachments';

export const RECLAIM_AFTER_MS = 60_000;

/**
 * Who holds an address in host-local's directory of `network` ("containerID\0ifname",
 * "containerID\0" for legacy files); undefined: unreadable.
 */
function holders(ipamDir: string, network: string): Set<string> | undefined {
  const dir = join(ipamDir, network);
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return undefined;
  }
  const out = new Set<string>();
  for (const name of names) {
    if (!IP.parse(name)) continue;
    try {
      const owner = parseOwner(fs.readFileSync(join(dir, name), 'utf8'));
      if (owner) out.add(`${owner.containerId}\0${owner.ifname ?? ''}`);
    } catch {
      // released meanwhile
    }
  }
  return out;
}

/** The network and host-local directory of a saved delegate config; undefined when its IPAM is not host-local. */
function hostLocalOf(text: string): { network: string; ipamDir: string } | undefined {
  try {
    const conf = JSON.parse(text) as { name?: unknown; ipam?: { type?: unknown; dataDir?: unknown } };
    if (conf.ipam?.type !== 'host-local') return undefined;
    const network = validateNetworkName(conf.name);
    const dir = conf.ipam.dataDir;
    return { network, ipamDir: typeof dir === 'string' && dir.startsWith('/') ? dir : DEFAULT_IPAM_DIR };
  } catch {
    return undefined;
  }
}

/**
 * Removes the attachment files in `dataDir` that flannel's plugin DELeted
 * (see the top of this file); returns one line per file removed, for the log.
 */
export function reclaimLeftovers(dataDir: string, now = Date.now()): string[] {
  let names: string[];
  try {
    names = fs.readdirSync(dataDir);
  } catch {
    return []; // no pod was ever attached here (or the directory is not mounted)
  }
  const present = new Set(names);
  const held = new Map<string, Set<string> | undefined>();
  const removed: string[] = [];
  for (const name of names) {
    const key = parseSavedName(name);
    if (!key || present.has(key.containerId)) continue;
    const file = join(dataDir, name);
    let text: string;
    try {
      if (now - fs.statSync(file).mtimeMs < RECLAIM_AFTER_MS) continue;
      text = fs.readFileSync(file, 'utf8');
    } catch {
      continue; // removed meanwhile
    }
    const ipam = hostLocalOf(text);
    if (!ipam) continue;
    const where = `${ipam.ipamDir}\0${ipam.network}`;
    if (!held.has(where)) held.set(where, holders(ipam.ipamDir, ipam.network));
    const owners = held.get(where);
    if (!owners || owners.has(`${key.containerId}\0${key.ifname}`) || owners.has(`${key.containerId}\0`)) continue;
    removeFile(file);
    removed.push(
      `removed ${file}: container ${key.containerId} (${key.ifname}) was deleted by flannel's own plugin ` +
        `(its ${key.containerId} file is gone, host-local's ${join(ipam.ipamDir, ipam.network)} holds no address for it)`,
    );
  }
  return removed;
}
