// Execs a delegate plugin to completion, blocking this process: what a CNI
// call wants (it has nothing else to do while its delegate runs), without
// node:child_process, whose async machinery (net, streams) costs ~2 ms to
// load, and more in the standalone executable, whose CNI calls start with
// other V8 flags than Node's own code cache of those modules was made with
// (boot/v8-tiers.ts). Same output, exit code and errors as execPlugin
// (cni/delegate.ts). Installed by src/cmd/* with setPluginExec.
import { CniError, ErrorCode } from '../cni/errors';
import type { ExecResult } from '../cni/delegate';
import { spawnSyncLean, type SyncRun } from './spawn-sync';

export function execPluginSync(file: string, env: NodeJS.ProcessEnv, stdin: string): Promise<ExecResult> {
  let r: SyncRun;
  try {
    r = spawnSyncLean(file, [], { env, input: stdin });
  } catch (err) {
    // the words child_process's spawn error carries ("spawn FILE EACCES"), as execPlugin reports it
    return Promise.reject(new CniError(ErrorCode.Internal, `cannot run plugin ${file}: spawn ${file} ${(err as NodeJS.ErrnoException).code}`));
  }
  return Promise.resolve({ stdout: r.stdout, stderr: r.stderr, exitCode: r.status ?? (r.signal ? 128 : 1) });
}
