// Sysctls. /proc/sys/net answers for the namespace of the process that opens
// it, so the plugin's own namespace ("the host") is read and written as plain
// files, with no process; another namespace is entered with nsenter and procps
// `sysctl` (argv only). Both go through exec.ts's seam, so tests see them.
// Keys use '/' as the separator so interface names may contain dots
// (eth0.100): "net/ipv6/conf/eth0.100/accept_dad".
import { exec, ownProcSys } from './exec';

export type SysctlKey = string;

const KEY_RE = /^[a-z0-9_]+(\/[^/\s=]+)+$/;

function checkKey(key: SysctlKey): void {
  if (!KEY_RE.test(key) || key.split('/').some((p) => p === '.' || p === '..')) {
    throw new Error(`invalid sysctl key ${JSON.stringify(key)}`);
  }
}

/** Reads a sysctl of the plugin's own namespace, or undefined when it does not exist. */
export function readSysctl(key: SysctlKey): string | undefined {
  checkKey(key);
  return ownProcSys().read(key);
}

/** Writes a sysctl of the plugin's own namespace; throws on failure. */
export function writeSysctl(key: SysctlKey, value: string): void {
  checkKey(key);
  ownProcSys().write(key, value);
}

/** Writes `value` unless it is already set (the read is cheaper than a write that fires notifiers). */
export function ensureSysctl(key: SysctlKey, value: string): void {
  if (readSysctl(key) !== value) writeSysctl(key, value);
}

/** Best effort: like writeSysctl, but a missing key or a refused write is ignored. */
export function trySysctl(key: SysctlKey, value: string): boolean {
  try {
    writeSysctl(key, value);
    return true;
  } catch {
    return false;
  }
}

/** The argv that sets `settings` with procps sysctl; keys that do not exist are ignored (-e). */
export function sysctlArgv(settings: ReadonlyArray<readonly [SysctlKey, string]>): string[] {
  for (const [key, value] of settings) {
    checkKey(key);
    if (!/^[\w.-]+$/.test(value)) throw new Error(`invalid sysctl value ${JSON.stringify(value)} for ${key}`);
  }
  return ['sysctl', '-q', '-e', '-w', ...settings.map(([k, v]) => `${k}=${v}`)];
}

/** Sets sysctls inside another network namespace: one process (nsenter + sysctl). */
export async function setSysctlsIn(netns: string, settings: ReadonlyArray<readonly [SysctlKey, string]>): Promise<void> {
  if (settings.length === 0) return;
  await exec(sysctlArgv(settings), { netns });
}
