// Spec versions this project speaks, and what each one allows.
import { CniError, ErrorCode } from './errors';

export const SUPPORTED_VERSIONS = ['0.1.0', '0.2.0', '0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] as const;
export const LATEST_VERSION = '1.1.0';

/** Compares dotted versions numerically: negative when a < b. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

export const atLeast = (version: string, min: string) => compareVersions(version, min) >= 0;

export function isSupported(version: string): boolean {
  return (SUPPORTED_VERSIONS as readonly string[]).includes(version);
}

export function requireSupported(version: string): void {
  if (!isSupported(version)) {
    throw new CniError(
      ErrorCode.IncompatibleVersion,
      `incompatible CNI versions: cniVersion ${JSON.stringify(version)} is not supported`,
      `plugin supports ${SUPPORTED_VERSIONS.join(', ')}`,
    );
  }
}

/** The lowest spec version that defines each command. */
export const COMMAND_MIN_VERSION: Record<string, string> = {
  ADD: '0.1.0',
  DEL: '0.1.0',
  VERSION: '0.1.0',
  CHECK: '0.4.0',
  GC: '1.1.0',
  STATUS: '1.1.0',
};
