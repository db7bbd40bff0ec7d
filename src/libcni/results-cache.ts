// libcni's results cache (<cacheDir>/results/<network>-<containerID>-<ifname>):
// every runtime on libcni (containerd, CRI-O, podman's CNI backend) writes one
// file per attachment on ADD and removes it after a successful DEL. After a
// power loss the files of the containers that died are still there, and
// they hold what a DEL needs: netns, CNI_ARGS, capability args, the result.
import { readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { Json } from '../cni/config';

export const DEFAULT_CACHE_DIR = '/var/lib/cni';

/** libcni's cachedInfo "kind". */
const CACHE_KIND = 'cniCacheV1';

export interface CachedAttachment {
  /** The cache file. */
  file: string;
  /** When libcni wrote it: the end of the attachment's ADD. */
  mtimeMs: number;
  network: string;
  containerId: string;
  ifname: string;
  netns: string;
  /** CNI_ARGS as key/value pairs. */
  cniArgs: [string, string][];
  capabilityArgs: Json;
  /** The chain's ADD result as cached (any version), when there is one. */
  result?: Json;
}

/**
 * Every readable attachment in the cache, in file name order, like libcni's
 * GetCachedAttachments(""): files that are not JSON, of another kind, or
 * without a network or ifname are passed over.
 */
export function readCachedAttachments(cacheDir = DEFAULT_CACHE_DIR): CachedAttachment[] {
  const dir = join(cacheDir, 'results');
  let names: string[];
  try {
    names = readdirSync(dir).sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const out: CachedAttachment[] = [];
  for (const name of names) {
    const file = join(dir, name);
    let info: Json;
    let mtimeMs: number;
    try {
      info = JSON.parse(readFileSync(file, 'utf8')) as Json;
      mtimeMs = statSync(file).mtimeMs;
    } catch {
      continue;
    }
    if (!info || info.kind !== CACHE_KIND || !isNonEmpty(info.networkName) || !isNonEmpty(info.ifName)) continue;
    out.push({
      file,
      mtimeMs,
      network: info.networkName,
      containerId: typeof info.containerId === 'string' ? info.containerId : '',
      ifname: info.ifName,
      netns: typeof info.netns === 'string' ? info.netns : '',
      cniArgs: Array.isArray(info.cniArgs) ? (info.cniArgs as unknown[]).filter(isPair) : [],
      capabilityArgs: isObject(info.capabilityArgs) ? info.capabilityArgs : {},
      ...(isObject(info.result) ? { result: info.result } : {}),
    });
  }
  return out;
}

/** Drops an attachment's cache file (libcni's cacheDel after a successful DEL). */
export function removeCachedAttachment(attachment: CachedAttachment): void {
  rmSync(attachment.file, { force: true });
}

const isNonEmpty = (v: unknown): v is string => typeof v === 'string' && v !== '';
const isObject = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v);
const isPair = (v: unknown): v is [string, string] =>
  Array.isArray(v) && v.length === 2 && typeof v[0] === 'string' && typeof v[1] === 'string';
