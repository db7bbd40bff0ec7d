// Delegates that are our own build run in the calling process. By the spec a
// plugin execs its delegate (found in CNI_PATH) with an environment and a
// config on stdin. When that file carries this very build's stamp
// (build-stamp.ts), whatever its install (hard link, symlink, copy, package,
// script), the same code is already here: its CNI boundary (skel.handle) is
// called exactly as its executable would call it, with the same environment,
// stdin and printed output, so results and errors are identical and one Node
// start is saved per hop. A file of another build, or not ours, is exec'd.
//
// CNI_TS_DELEGATE_EXEC=1 forces the exec path everywhere (tests compare both).
import { basename } from 'node:path';
import { handle, type PluginHandlers } from './skel';
import { ownBuildStamp, readBuildStamp, type BuildStamp } from './build-stamp';

export type PluginLoader = () => Promise<PluginHandlers>;

/** Bundle name -> its plugin, for the bundles this executable holds; set by src/cmd/*. */
const loaders = new Map<string, PluginLoader>();

/** Declares that this executable holds the plugin of `bundle` (loaded on first use). */
export function holdsPlugin(bundle: string, load: PluginLoader): void {
  loaders.set(bundle, load);
}

/** Whether delegates must be exec'd whatever they are. */
const execForced = () => process.env.CNI_TS_DELEGATE_EXEC === '1';

/**
 * The plugin `file` runs, when it is this build and this executable holds
 * that plugin; undefined means exec it. A script runs the bundle its stamp
 * names, a standalone executable the one it is named after.
 */
export function ownPlugin(file: string, self: () => BuildStamp | undefined = ownBuildStamp): PluginLoader | undefined {
  if (loaders.size === 0 || execForced()) return undefined;
  const own = self();
  if (!own) return undefined;
  const stamp = readBuildStamp(file);
  if (!stamp || stamp.id !== own.id) return undefined;
  return loaders.get(stamp.bundle ?? basename(file));
}

export interface PluginOutput {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/** Runs a plugin in this process as its executable would run: what it would print, and its exit code. */
export async function runInProcess(load: PluginLoader, env: NodeJS.ProcessEnv, stdin: string): Promise<PluginOutput> {
  // Its stderr goes straight to ours, where the exec path copies it.
  const out = await handle(await load(), env, () => stdin);
  return { stdout: out.stdout, stderr: '', exitCode: out.exitCode };
}
