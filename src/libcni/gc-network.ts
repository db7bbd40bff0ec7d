// One network's garbage collection, run through its own plugins the way
// libcni's GCNetworkList does it (libcni/api.go, v1.3.0):
//   1. every attachment of the network in libcni's results cache that is not
//      valid is DELeted through the whole chain (last plugin first, the cached
//      result as prevResult from 0.4.0 on), and its cache file removed;
//   2. every plugin is sent GC with `cni.dev/valid-attachments`.
// One difference, for the runtimes people run: libcni sends GC only to lists
// of cniVersion 1.1.0, and containerd 1.6/1.7 run 1.0.0 lists at most. So GC
// goes at 1.1.0 to every plugin whose VERSION lists 1.1.0, whatever the list
// says; the others are skipped and reported. A failure is recorded and the
// rest still runs, as in libcni.
//
// For `host-local repair`, two more: the caller may name the stale
// attachments (only those are DELeted, and our plugins release only those:
// see gc.ts), and a dry run that changes nothing and reports what would be
// done. And one guard libcni lacks: a cached netns /proc/<pid>/ns/net whose
// pid now belongs to a process started after the entry was written (a reboot
// since) is not handed to the DEL, which would otherwise enter that
// unrelated process's namespace.
import { readFileSync } from 'node:fs';
import { delegateEnv, execPlugin, findPlugin, readPluginOutput } from '../cni/delegate';
import { AttachmentSet, LEGACY_VALID_KEY, STALE_KEY, VALID_KEY, type Attachment } from '../cni/gc';
import { formatResult, parseResult } from '../cni/result';
import { atLeast } from '../cni/version';
import { DEFAULT_CACHE_DIR, readCachedAttachments, removeCachedAttachment, type CachedAttachment } from './results-cache';
import type { NetworkConfigList } from './conf-dir';
import type { Json } from '../cni/config';
import type { Command, Invocation } from '../cni/env';

/** The version GC is sent at: the first (and so far only) version that has GC. */
const GC_VERSION = '1.1.0';

export interface GcOptions {
  /** Directories searched for the chain's plugins (CNI_PATH). */
  path: string[];
  /** The attachments the runtime still runs; everything else of the network is garbage. */
  validAttachments: Attachment[];
  /** libcni's cache directory (default /var/lib/cni). */
  cacheDir?: string;
  /**
   * The attachments the caller found stale: only these cached attachments are
   * DELeted, and they are sent as cni-ts.dev/stale-attachments with the GC.
   */
  staleAttachments?: Attachment[];
  /** Change nothing: report what would be DELeted and which plugins would get GC (VERSION still runs). */
  dryRun?: boolean;
}

export interface GcReport {
  network: string;
  /** The list sets disableGC: nothing was done. */
  disabled: boolean;
  /** Stale cached attachments DELeted through the chain (their cache files removed); in a dry run, to be. */
  deleted: CachedAttachment[];
  /** Plugin types sent GC, in chain order; in a dry run, to be. */
  collected: string[];
  /** Plugins not sent GC because their VERSION does not list 1.1.0. */
  skipped: { type: string; supportedVersions: string[] }[];
  /** What failed, each naming the plugin or attachment; the rest still ran. */
  errors: string[];
}

/** The network's attachments in libcni's results cache that are not valid: what step 1 DELs. */
export function staleCachedAttachments(network: string, valid: readonly Attachment[], cacheDir = DEFAULT_CACHE_DIR): CachedAttachment[] {
  const keep = new AttachmentSet(valid);
  return readCachedAttachments(cacheDir).filter((a) => a.network === network && !keep.has(a.containerId, a.ifname));
}

export async function gcNetwork(list: NetworkConfigList, options: GcOptions): Promise<GcReport> {
  const report: GcReport = { network: list.name, disabled: list.disableGC, deleted: [], collected: [], skipped: [], errors: [] };
  if (list.disableGC) return report;

  let stale: CachedAttachment[] = [];
  try {
    stale = staleCachedAttachments(list.name, options.validAttachments, options.cacheDir);
    const named = options.staleAttachments && new AttachmentSet(options.staleAttachments);
    if (named) stale = stale.filter((a) => named.has(a.containerId, a.ifname));
  } catch (err) {
    report.errors.push(`reading the results cache: ${messageOf(err)}`); // libcni silently skips the whole GC here
  }
  for (const attachment of stale) {
    if (options.dryRun) {
      report.deleted.push(attachment);
      continue;
    }
    try {
      await delChain(list, attachment, options.path);
      removeCachedAttachment(attachment);
      report.deleted.push(attachment);
    } catch (err) {
      report.errors.push(`DEL of stale attachment ${attachment.containerId} ${attachment.ifname}: ${messageOf(err)}`);
    }
  }

  const valid = options.validAttachments.map(({ containerID, ifname }) => ({ containerID, ifname }));
  // libcni injects both valid keys: the spec first named it cni.dev/attachments (libcni #1101).
  const keys = { [VALID_KEY]: valid, [LEGACY_VALID_KEY]: valid, ...(options.staleAttachments ? { [STALE_KEY]: options.staleAttachments } : {}) };
  const inv = invocation('GC', options.path);
  for (const [i, plugin] of list.plugins.entries()) {
    const type = plugin.type as string;
    try {
      const file = findPlugin(type, options.path, `plugins[${i}].type`);
      const supportedVersions = await pluginVersions(type, file);
      if (!supportedVersions.includes(GC_VERSION)) {
        report.skipped.push({ type, supportedVersions });
        continue;
      }
      if (!options.dryRun) {
        const conf = { ...plugin, name: list.name, cniVersion: GC_VERSION, ...keys };
        readPluginOutput(type, 'GC', await execPlugin(file, delegateEnv(inv, 'GC'), JSON.stringify(conf)));
      }
      report.collected.push(type);
    } catch (err) {
      report.errors.push(`GC of plugin "${type}": ${messageOf(err)}`);
    }
  }
  return report;
}

/** libcni's DelNetworkList for a cached attachment: the current chain, last plugin first. */
async function delChain(list: NetworkConfigList, attachment: CachedAttachment, path: string[]): Promise<void> {
  const prevResult = atLeast(list.cniVersion, '0.4.0') ? cachedResult(attachment, list.cniVersion) : undefined;
  const inv = invocation('DEL', path, { ...attachment, netns: netnsStillTheContainers(attachment) });
  for (let i = list.plugins.length - 1; i >= 0; i--) {
    const plugin = list.plugins[i];
    const type = plugin.type as string;
    const conf = {
      ...plugin,
      name: list.name,
      cniVersion: list.cniVersion,
      ...(prevResult ? { prevResult } : {}),
      ...runtimeConfig(plugin, attachment.capabilityArgs),
    };
    const file = findPlugin(type, path, `plugins[${i}].type`);
    readPluginOutput(type, 'DEL', await execPlugin(file, delegateEnv(inv, 'DEL'), JSON.stringify(conf)));
  }
}

/** The cached result in the list's version; none when it cannot be expressed there (libcni drops it too). */
function cachedResult(attachment: CachedAttachment, cniVersion: string): Json | undefined {
  if (!attachment.result) return undefined;
  try {
    return formatResult(parseResult(attachment.result), cniVersion);
  } catch {
    return undefined;
  }
}

/** The capability args a plugin declares in "capabilities", as libcni's injectRuntimeConfig passes them. */
function runtimeConfig(plugin: Json, capabilityArgs: Json): { runtimeConfig?: Json } {
  const capabilities = (plugin.capabilities ?? {}) as Record<string, unknown>;
  const rc: Json = {};
  for (const [name, enabled] of Object.entries(capabilities)) {
    if (enabled === true && name in capabilityArgs) rc[name] = capabilityArgs[name];
  }
  return Object.keys(rc).length ? { runtimeConfig: rc } : {};
}

/** What libcni sets for a call: CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_ARGS empty unless an attachment is named. */
function invocation(command: Command, path: string[], attachment?: CachedAttachment): Invocation {
  const args = attachment?.cniArgs ?? [];
  return {
    command,
    containerId: attachment?.containerId ?? '',
    netns: attachment?.netns ?? '',
    ifname: attachment?.ifname ?? '',
    args: new Map(args),
    rawArgs: args.map(([k, v]) => `${k}=${v}`).join(';'),
    path,
  };
}

/**
 * The cached netns, unless it is a process's (/proc/<pid>/...) and that pid
 * is now a process started after the entry was written: a pid reused since a
 * reboot. '' then (DEL needs no netns; the namespace is gone anyway).
 */
function netnsStillTheContainers(attachment: CachedAttachment): string {
  const pid = /^\/proc\/(\d+)\//.exec(attachment.netns)?.[1];
  if (!pid) return attachment.netns;
  const started = processStartMs(pid);
  return started !== undefined && started <= attachment.mtimeMs ? attachment.netns : '';
}

/** USER_HZ, the unit of /proc/<pid>/stat's start time: 100 on every Linux architecture Node runs on. */
const CLOCK_TICKS_PER_S = 100;

/** When a process started (ms since the epoch), or undefined when there is no such process. */
function processStartMs(pid: string): number | undefined {
  try {
    // the fields after the command name, which may itself hold spaces and parentheses
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '').split(' ');
    const ticks = Number(fields[19]); // field 22, starttime: ticks since boot
    const bootS = Number(/^btime (\d+)$/m.exec(readFileSync('/proc/stat', 'utf8'))?.[1]);
    return Number.isFinite(ticks) && Number.isFinite(bootS) ? bootS * 1000 + (ticks * 1000) / CLOCK_TICKS_PER_S : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The versions a plugin supports (libcni's GetVersionInfo: VERSION with
 * placeholder netns/ifname/path for plugins built on an old skel).
 */
async function pluginVersions(type: string, file: string): Promise<string[]> {
  const inv = { ...invocation('VERSION', ['dummy']), netns: 'dummy', ifname: 'dummy' };
  const run = await execPlugin(file, delegateEnv(inv, 'VERSION'), JSON.stringify({ cniVersion: GC_VERSION }));
  if (run.exitCode !== 0 && errorMessage(run.stdout) === 'unknown CNI_COMMAND: VERSION') return ['0.1.0'];
  readPluginOutput(type, 'VERSION', run);
  let info: { cniVersion?: unknown; supportedVersions?: unknown };
  try {
    info = JSON.parse(run.stdout);
  } catch {
    throw new Error(`VERSION printed no JSON: ${run.stdout.slice(0, 200)}`);
  }
  if (Array.isArray(info.supportedVersions) && info.supportedVersions.length > 0) {
    return info.supportedVersions.filter((v): v is string => typeof v === 'string');
  }
  if (info.cniVersion === '0.2.0') return ['0.1.0', '0.2.0'];
  throw new Error('VERSION answered without "supportedVersions"');
}

function errorMessage(stdout: string): unknown {
  try {
    return (JSON.parse(stdout) as { msg?: unknown }).msg;
  } catch {
    return undefined;
  }
}

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));
