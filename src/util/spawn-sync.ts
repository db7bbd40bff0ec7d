// Runs a command to completion, blocking this process: spawnSync without
// loading node:child_process. That module is built for the async API too and
// loads net, dgram and the whole stream machinery on first require: 2-2.5 ms
// on every plugin call that runs a command (the bridge's ip, the lock's
// flock(1)), more than a whole `ip` process costs. Its spawnSync is a thin
// layer over the `spawn_sync` binding, which this module calls directly with
// the options child_process.spawnSync would pass it. Where the binding cannot
// be had (a Node without process.binding, or the permission model refusing
// it), child_process.spawnSync does the same job. (Node run with
// --pending-deprecation prints a DEP0111 warning for process.binding on stderr.)

export interface SyncSpawnOptions {
  /** Text for the child's stdin. */
  input?: string;
  /** The child's environment; this process's own when absent. */
  env?: NodeJS.ProcessEnv;
  /** Descriptors of this process the child gets as its fd 3, 4, ... */
  extraFds?: readonly number[];
}

export interface SyncRun {
  stdout: string;
  stderr: string;
  /** The exit code; null when a signal ended the process. */
  status: number | null;
  /** The signal that ended the process ("SIGKILL"), or null. */
  signal: string | null;
}

/** What the spawn_sync binding returns (node/src/spawn_sync.cc, BuildResultObject). */
interface BindingResult {
  status?: number | null;
  signal?: string | null;
  output?: (Buffer | null)[] | null;
  /** A negative errno when the process could not be run. */
  error?: number;
}

interface SpawnSyncBinding {
  spawn(options: object): BindingResult;
}

const MAX_BUFFER = 64 << 20;

/** -EPIPE (Linux): the command ran but exited without reading all of its stdin. */
const EPIPE = -32;

let binding: SpawnSyncBinding | null | undefined;

function spawnSyncBinding(): SpawnSyncBinding | null {
  if (binding === undefined) {
    try {
      const b = (process as unknown as { binding(name: string): unknown }).binding('spawn_sync') as SpawnSyncBinding;
      binding = typeof b?.spawn === 'function' ? b : null;
    } catch {
      binding = null;
    }
  }
  return binding;
}

/** An errno number as Node names it ("ENOENT"), for the error thrown when a command cannot be run. */
function errnoError(errno: number, file: string): NodeJS.ErrnoException {
  const { getSystemErrorName } = require('node:util') as typeof import('node:util');
  const code = getSystemErrorName(errno);
  const err: NodeJS.ErrnoException = new Error(`spawnSync ${file} ${code}`);
  err.errno = errno;
  err.code = code;
  err.syscall = `spawnSync ${file}`;
  err.path = file;
  return err;
}

/**
 * Runs `file` (looked up in PATH) with `args`; collects stdout and stderr as
 * UTF-8. Throws only when the command cannot be run at all (not found, not
 * executable): one that ran and exited without reading all of its stdin
 * (EPIPE) has its exit status and output like any other.
 */
export function spawnSyncLean(file: string, args: readonly string[], o: SyncSpawnOptions = {}): SyncRun {
  const b = spawnSyncBinding();
  if (!b) return viaChildProcess(file, args, o);
  const envPairs: string[] = [];
  for (const [k, v] of Object.entries(o.env ?? process.env)) if (v !== undefined) envPairs.push(`${k}=${v}`);
  const r = b.spawn({
    file,
    args: [file, ...args],
    envPairs,
    stdio: [
      { type: 'pipe', readable: true, writable: false, input: Buffer.from(o.input ?? '') },
      { type: 'pipe', readable: false, writable: true },
      { type: 'pipe', readable: false, writable: true },
      ...(o.extraFds ?? []).map((fd) => ({ type: 'fd', fd })),
    ],
    maxBuffer: MAX_BUFFER,
    killSignal: undefined,
    detached: false,
    windowsHide: false,
    windowsVerbatimArguments: false,
  });
  const ran = typeof r.status === 'number' || !!r.signal;
  if (r.error && !(r.error === EPIPE && ran)) throw errnoError(r.error, file);
  const [, out, err] = r.output ?? [];
  return { stdout: out?.toString() ?? '', stderr: err?.toString() ?? '', status: r.status ?? null, signal: r.signal ?? null };
}

function viaChildProcess(file: string, args: readonly string[], o: SyncSpawnOptions): SyncRun {
  const { spawnSync } = require('node:child_process') as typeof import('node:child_process');
  const r = spawnSync(file, args, {
    input: o.input ?? '',
    env: o.env ?? process.env,
    stdio: ['pipe', 'pipe', 'pipe', ...(o.extraFds ?? [])],
    encoding: 'utf8',
    maxBuffer: MAX_BUFFER,
  });
  const ran = typeof r.status === 'number' || !!r.signal;
  if (r.error && !((r.error as NodeJS.ErrnoException).code === 'EPIPE' && ran)) throw r.error;
  return { stdout: r.stdout, stderr: r.stderr, status: r.status, signal: r.signal };
}
