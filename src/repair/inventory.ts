// What one network holds on this node, read without changing anything: the
// attachments (container ID, ifname) that have state, with their addresses
// and when their newest state was written. The state read is what the
// network's GC releases and what names its owner:
//   - host-local reservations, for every plugin of the chain whose IPAM is
//     host-local, and for a flannel plugin's delegate (host-local unless its
//     "ipam" says otherwise);
//   - libcni's results cache entries of the network;
//   - flannel's saved configs of the network.
// Masquerade rules and host veths carry only hashes of their attachment, so
// they are found through these (the bridge's GC derives them). Addresses
// parked for a deleted pod (stickyTTL) are the pod's until the parking ends:
// they are counted, never listed; a parking that has ended is a reservation
// like any other (host-local's next call under the lock releases it).
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { validateNetworkName, type Json, type NetConf } from '../cni/config';
import { readCachedAttachments } from '../libcni/results-cache';
import type { NetworkConfigList } from '../libcni/conf-dir';
import { loadStoreLocation } from '../ipam/config';
import { NetworkPool } from '../ipam/network-pool';
import { loadFlannelConf } from '../flannel/plugin/cni';
import { savedConfigs } from '../flannel/attachments';

export interface HeldAttachment {
  containerID: string;
  /** '' when all its state records only the container (legacy reservation files, flannel's per-container files). */
  ifname: string;
  /** Its host-local addresses, v4 first. */
  addresses: string[];
  /** When its newest state was written (ms since the epoch). */
  newestMs: number;
}

export interface TornReservation {
  address: string;
  mtimeMs: number;
}

export interface NetworkInventory {
  network: string;
  attachments: HeldAttachment[];
  /** Reservation files that are empty or unreadable: no owner, so no attachment. */
  torn: TornReservation[];
  /** Attachments whose addresses are parked for their pod (stickyTTL) right now: "<containerID>\n<ifname>". */
  parked: Set<string>;
}

const FLANNEL_TYPES = new Set(['flannel', 'vxlan-flannel']);

export async function readInventory(list: NetworkConfigList, cacheDir: string): Promise<NetworkInventory> {
  const network = validateNetworkName(list.name);
  const { hostLocalDirs, flannelDirs } = stateDirs(list);
  const held = new Map<string, HeldAttachment>();
  const hold = (containerID: string, ifname: string, mtimeMs: number, address?: string) => {
    const key = attachmentKey(containerID, ifname);
    let a = held.get(key);
    if (!a) held.set(key, (a = { containerID, ifname, addresses: [], newestMs: mtimeMs }));
    a.newestMs = Math.max(a.newestMs, mtimeMs);
    if (address !== undefined && !a.addresses.includes(address)) a.addresses.push(address);
  };
  const torn: TornReservation[] = [];
  const parked = new Set<string>();
  const now = Date.now();

  for (const dataDir of hostLocalDirs) {
    const reservations = new NetworkPool({ dataDir, network, lockTimeoutMs: 0 }).reservations();
    for (const r of reservations.sort((x, y) => x.ip.compare(y.ip))) {
      if (!r.owner) torn.push({ address: r.ip.toString(), mtimeMs: r.tornSinceMs ?? 0 });
      else if (r.parking && r.parking.expiresAt > now) parked.add(attachmentKey(r.owner.containerId, r.owner.ifname ?? ''));
      else hold(r.owner.containerId, r.owner.ifname ?? '', writtenAt(join(dataDir, network, r.name)), r.ip.toString());
    }
  }
  for (const c of readCachedAttachments(cacheDir)) if (c.network === network) hold(c.containerId, c.ifname, c.mtimeMs);
  for (const dir of flannelDirs) for (const s of savedConfigs(dir, network)) hold(s.containerId, s.ifname ?? '', s.mtimeMs);

  return { network, attachments: foldContainerState([...held.values()]), torn, parked };
}

/** A file's mtime; now when it is gone (a file that just went cannot be judged old). */
function writtenAt(file: string): number {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return Date.now();
  }
}

/** The directories the chain keeps readable state in; a config error names the plugin. */
function stateDirs(list: NetworkConfigList): { hostLocalDirs: string[]; flannelDirs: string[] } {
  const hostLocalDirs = new Set<string>();
  const flannelDirs = new Set<string>();
  list.plugins.forEach((plugin, i) => {
    const conf = { ...plugin, name: list.name, cniVersion: list.cniVersion } as NetConf;
    const ipam = isObject(plugin.ipam) ? plugin.ipam : undefined;
    try {
      if (FLANNEL_TYPES.has(plugin.type as string)) {
        flannelDirs.add(loadFlannelConf(conf).dataDir);
        // the delegate gets the flannel config's "ipam", host-local by default
        if ((ipam?.type ?? 'host-local') === 'host-local') hostLocalDirs.add(loadStoreLocation({ ...conf, ipam: ipam ?? {} }).dataDir);
      } else if (ipam?.type === 'host-local') {
        hostLocalDirs.add(loadStoreLocation(conf).dataDir);
      }
    } catch (err) {
      throw new Error(`plugins[${i}] (${String(plugin.type)}): ${(err as Error).message}`);
    }
  });
  return { hostLocalDirs: [...hostLocalDirs], flannelDirs: [...flannelDirs] };
}

/**
 * State that records only the container belongs to the container's other
 * attachments on the network when it has any (GC releases it with the last
 * of them): it is folded into the first.
 */
function foldContainerState(all: HeldAttachment[]): HeldAttachment[] {
  const out = all.filter((a) => a.ifname !== '');
  for (const bare of all.filter((a) => a.ifname === '')) {
    const owner = out.find((a) => a.containerID === bare.containerID);
    if (!owner) {
      out.push(bare);
      continue;
    }
    owner.newestMs = Math.max(owner.newestMs, bare.newestMs);
    owner.addresses.push(...bare.addresses.filter((ip) => !owner.addresses.includes(ip)));
  }
  return out;
}

export const attachmentKey = (containerID: string, ifname: string) => `${containerID}\n${ifname}`;
const isObject = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v);
