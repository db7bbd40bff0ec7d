// The IPAM delegate. By the spec the bridge execs `ipam.type` from CNI_PATH
// with its own environment and config. When that file is our own host-local
// bundle, installed beside this bridge bundle, the same code runs in this
// process instead: the CNI boundary (skel.handle) is called exactly as the
// host-local executable would call it, with the same environment, stdin and
// printed output, so the result and errors are identical and one Node start
// (~80 ms) is saved. CNI_TS_IPAM_EXEC=1 forces the exec path.
import { closeSync, openSync, readSync, realpathSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { delegateEnv, execPlugin, findPlugin, readPluginOutput, type ExecResult } from '../cni/delegate';
import type { Result } from '../cni/result';
import type { Command } from '../cni/env';
import type { Request } from '../cni/skel';
import { atLeast } from '../cni/version';

export interface IpamPlan {
  type: string;
  file: string;
  inProcess: boolean;
}

/** Finds the IPAM plugin (a config error when it is not in CNI_PATH) and decides how to run it. */
export function planIpam(type: string, path: readonly string[]): IpamPlan {
  const file = findPlugin(type, path, 'ipam.type');
  return { type, file, inProcess: type === 'host-local' && isOurBundle(file) };
}

/** How our scripts begin (build.mjs: env(1) unsets NODE_OPTIONS first, then the other NODE_* variables Node reads at start). */
const SHEBANG = '#!/usr/bin/env -S -u NODE_OPTIONS ';

/**
 * Our host-local, runnable in this process: this very executable (the
 * standalone one is a single file under every plugin name), or our script
 * bundle installed beside this script bundle.
 */
function isOurBundle(file: string): boolean {
  if (process.env.CNI_TS_IPAM_EXEC === '1') return false;
  try {
    const [a, b] = [statSync(file), statSync(process.execPath)];
    if (a.dev === b.dev && a.ino === b.ino) return true;
    const self = process.argv[1];
    if (!self || realpathSync(dirname(file)) !== realpathSync(dirname(self))) return false;
    const fd = openSync(file, 'r');
    try {
      const buf = Buffer.alloc(SHEBANG.length);
      readSync(fd, buf, 0, buf.length, 0);
      return buf.toString() === SHEBANG;
    } finally {
      closeSync(fd);
    }
  } catch {
    return false;
  }
}

async function run(plan: IpamPlan, command: Command, req: Request): Promise<ExecResult> {
  const env = delegateEnv(req.inv, command);
  if (!plan.inProcess) return execPlugin(plan.file, env, req.stdin);
  const [{ handle }, { hostLocal }] = await Promise.all([import('../cni/skel'), import('../ipam/host-local')]);
  const out = await handle(hostLocal, env, () => req.stdin);
  return { stdout: out.stdout, stderr: '', exitCode: out.exitCode };
}

/**
 * Whether the IPAM plugin speaks spec 1.1 (STATUS, GC), by its VERSION
 * answer. A plugin whose answer cannot be read is taken to speak it.
 */
export async function ipamSpeaks11(plan: IpamPlan, req: Request): Promise<boolean> {
  try {
    const out = await run(plan, 'VERSION', { ...req, stdin: JSON.stringify({ cniVersion: '1.1.0' }) });
    const versions = (JSON.parse(out.stdout) as { supportedVersions?: unknown }).supportedVersions;
    if (!Array.isArray(versions) || versions.length === 0) return true;
    return versions.some((v) => typeof v === 'string' && atLeast(v, '1.1.0'));
  } catch {
    return true;
  }
}

/** Runs the IPAM plugin; ADD returns its result, the others undefined. Failures keep the plugin's code and message. */
export async function callIpam(plan: IpamPlan, command: Command, req: Request): Promise<Result | undefined> {
  return readPluginOutput(plan.type, command, await run(plan, command, req));
}
