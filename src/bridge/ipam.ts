// The IPAM delegate. By the spec the bridge execs `ipam.type` from CNI_PATH
// with its own environment and config. When that file is our own host-local
// of this very build (cni/in-process.ts), the same code runs in this process
// instead, with the same environment, stdin and printed output, so the result
// and errors are identical and one Node start (~80 ms) is saved.
// CNI_TS_IPAM_EXEC=1 forces the exec path for the IPAM plugin alone
// (CNI_TS_DELEGATE_EXEC=1 for every delegate).
import { execDelegate, findPlugin, delegateEnv, readPluginOutput, type ExecResult } from '../cni/delegate';
import { ownPlugin, runInProcess, type PluginLoader } from '../cni/in-process';
import type { Result } from '../cni/result';
import type { Command } from '../cni/env';
import type { Request } from '../cni/skel';
import { atLeast } from '../cni/version';

export interface IpamPlan {
  type: string;
  file: string;
  /** Set when the IPAM plugin is our own and runs in this process. */
  own?: PluginLoader;
}

/** Finds the IPAM plugin (a config error when it is not in CNI_PATH) and decides how to run it. */
export function planIpam(type: string, path: readonly string[]): IpamPlan {
  const file = findPlugin(type, path, 'ipam.type');
  const own = process.env.CNI_TS_IPAM_EXEC === '1' ? undefined : ownPlugin(file);
  return own ? { type, file, own } : { type, file };
}

async function run(plan: IpamPlan, command: Command, req: Request): Promise<ExecResult> {
  const env = delegateEnv(req.inv, command);
  return plan.own ? runInProcess(plan.own, env, req.stdin) : execDelegate(plan.file, env, req.stdin);
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
