// A runtime's network config directory (/etc/cni/net.d), read the way
// containerd's go-cni does it with libcni 1.3 (libcni/conf.go): the files
// ending in .conf, .conflist or .json, sorted by name; a .conflist is a list,
// any other file one plugin config upconverted to a one-plugin list.
import { readdirSync, readFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import { LATEST_VERSION, compareVersions } from '../cni/version';
import type { Json } from '../cni/config';

/** One network as a runtime runs it: a chain of plugin configs under one name and version. */
export interface NetworkConfigList {
  /** The file the network was read from. */
  file: string;
  name: string;
  /** The list's version ("" when none is given, which libcni reads as 0.1.0). */
  cniVersion: string;
  disableCheck: boolean;
  disableGC: boolean;
  /** The plugins' configs in chain order, as written (nothing injected). */
  plugins: Json[];
}

export interface ConfDir {
  networks: NetworkConfigList[];
  /** Files a runtime would refuse, with the reason. */
  invalid: { file: string; reason: string }[];
}

const EXTENSIONS = ['.conf', '.conflist', '.json'];
const VERSION_RE = /^\d+\.\d+\.\d+$/;

/** Reads every network config in `dir`; a missing directory holds none (as in libcni). */
export function readConfDir(dir: string): ConfDir {
  const out: ConfDir = { networks: [], invalid: [] };
  for (const file of confFiles(dir, EXTENSIONS)) {
    try {
      out.networks.push(file.endsWith('.conflist') ? readConfList(file) : readSingleConf(file));
    } catch (err) {
      out.invalid.push({ file, reason: (err as Error).message });
    }
  }
  return out;
}

/** libcni's ConfFiles + sort: the directory's non-directory entries with one of `extensions`. */
function confFiles(dir: string, extensions: readonly string[]): string[] {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  return entries
    .filter((e) => !e.isDirectory() && extensions.includes(extname(e.name)))
    .map((e) => join(dir, e.name))
    .sort();
}

function readJsonObject(file: string): Json {
  const value: unknown = JSON.parse(readFileSync(file, 'utf8'));
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error('expected a JSON object');
  return value as Json;
}

/** A plugin config must name its plugin (libcni's NetworkPluginConfFromBytes). */
function pluginConf(value: unknown, where: string): Json {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error(`${where} must be an object`);
  const type = (value as Json).type;
  if (typeof type !== 'string' || type === '') throw new Error(`${where} has no "type"`);
  return value as Json;
}

/** A .conf/.json file: one plugin, its own name and version become the list's (libcni's ConfListFromConf). */
function readSingleConf(file: string): NetworkConfigList {
  const conf = pluginConf(readJsonObject(file), 'the network config');
  return { file, ...listHeader({ name: conf.name ?? '', cniVersion: conf.cniVersion ?? '' }), plugins: [conf] };
}

/** A .conflist file (libcni's NetworkConfFromFile). */
function readConfList(file: string): NetworkConfigList {
  const raw = readJsonObject(file);
  const header = listHeader(raw);
  const inlinedOnly = readBool(raw, 'loadOnlyInlinedPlugins');
  const plugins: Json[] = [];
  if (raw.plugins !== undefined) {
    if (!Array.isArray(raw.plugins)) throw new Error('"plugins" must be a list');
    if (raw.plugins.length === 0) throw new Error('no plugins in list');
    raw.plugins.forEach((p, i) => plugins.push(pluginConf(p, `plugins[${i}]`)));
  } else if (inlinedOnly) {
    throw new Error('"loadOnlyInlinedPlugins" is true and there is no "plugins" list');
  }
  // libcni 1.3 appends <dir>/<name>/*.conf; a name that is not a plain file name cannot have one.
  if (!inlinedOnly && /^[^/]+$/.test(header.name) && header.name !== '.' && header.name !== '..') {
    const subdir = join(file, '..', header.name);
    for (const conf of confFiles(subdir, ['.conf'])) plugins.push(pluginConf(readJsonObject(conf), conf));
  }
  if (plugins.length === 0) throw new Error('no plugin configs found');
  return { file, ...header, plugins };
}

/** The fields a list carries for its whole chain. */
function listHeader(raw: Json): Omit<NetworkConfigList, 'file' | 'plugins'> {
  if (typeof raw.name !== 'string') throw new Error(raw.name === undefined ? 'no "name"' : '"name" must be a string');
  if (raw.cniVersion !== undefined && typeof raw.cniVersion !== 'string') throw new Error('"cniVersion" must be a string');
  return {
    name: raw.name,
    cniVersion: listVersion(raw),
    disableCheck: readBool(raw, 'disableCheck'),
    disableGC: readBool(raw, 'disableGC'),
  };
}

/**
 * `cniVersion`, or with `cniVersions` the highest of both that libcni
 * implements (1.1.0): a list may name versions newer runtimes will pick.
 */
function listVersion(raw: Json): string {
  const single = (raw.cniVersion as string | undefined) ?? '';
  if (raw.cniVersions === undefined) return single;
  if (!Array.isArray(raw.cniVersions)) throw new Error('"cniVersions" must be a list');
  const candidates = [...raw.cniVersions, ...(single ? [single] : [])].map((v, i) => {
    if (typeof v !== 'string' || !VERSION_RE.test(v)) throw new Error(`invalid cniVersions entry ${JSON.stringify(v)} at index ${i}`);
    return v;
  });
  const usable = candidates.filter((v) => compareVersions(v, LATEST_VERSION) <= 0).sort(compareVersions);
  return usable.at(-1) ?? single;
}

/** A list flag: a boolean or the string "true"/"false" in any case. */
function readBool(raw: Json, key: string): boolean {
  const v = raw[key];
  if (v === undefined) return false;
  if (typeof v === 'boolean') return v;
  if (typeof v === 'string' && ['true', 'false'].includes(v.toLowerCase())) return v.toLowerCase() === 'true';
  throw new Error(`invalid value ${JSON.stringify(v)} for "${key}"`);
}
