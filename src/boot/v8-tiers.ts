// V8's compiling tiers in the standalone executable. A CNI call is a process
// that runs each function a handful of times and exits within milliseconds:
// Sparkplug (baseline code, compiled on the main thread) and Maglev and
// TurboFan (optimized code, compiled on worker threads) only spend CPU on it
// that the call never gets back. So the executable starts with them off
// (build.mjs puts CNI_CALL_V8_FLAGS in its SEA config's execArgv, and
// generates the blob under the same flags: V8 keys the main script's code
// cache by its flags); measured on the pod chain, paired A/B, 50 pairs of
// ADD+DEL: CPU 0.91x, wall 0.96x (docs/speed.md). The same executable is also
// the overlay daemon and the operator's CLI, which run long and need the
// tiers: they get them back (restoreTiersUnlessCniCall) before their code is
// compiled. The script executables run on the host's node without these flags.
import { isCniInvocation } from '../cni/env';

/** The flags a CNI call of the standalone executable runs with (build.mjs reads this list). */
export const CNI_CALL_V8_FLAGS = ['--no-sparkplug', '--no-maglev', '--no-turbofan'] as const;

/** The flags that undo CNI_CALL_V8_FLAGS: V8's defaults. */
export const RESTORED_V8_FLAGS = CNI_CALL_V8_FLAGS.map((f) => f.replace(/^--no-/, '--'));

type SetFlags = (flags: string) => void;

/** node:v8 costs ~2 ms to load: only the long-running modes load it. */
const setV8Flags: SetFlags = (flags) => (require('node:v8') as typeof import('node:v8')).setFlagsFromString(flags);

/**
 * Turns the tiers back on unless this process is a CNI call (the same test the
 * plugin bundles make: src/cni/env.ts isCniInvocation). Returns whether it did.
 */
export function restoreTiersUnlessCniCall(env: NodeJS.ProcessEnv, args: readonly string[], setFlags: SetFlags = setV8Flags): boolean {
  if (isCniInvocation(env, args)) return false;
  for (const flag of RESTORED_V8_FLAGS) setFlags(flag);
  return true;
}
