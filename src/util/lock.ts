// Exclusive locks between processes: the kernel's flock(2) on a file, the lock
// the Go host-local takes on <network>/lock, so the two plugins exclude each
// other on one directory. The kernel frees it the moment its holder dies: a
// SIGKILLed call costs the next one nothing, and no stale lock is ever guessed at.
//
// Node has no flock(). util-linux's flock(1) takes it for us on a descriptor we
// open and hand it as fd 3; the lock belongs to the open file, not the process,
// so it stays ours when flock(1) exits, and ends when we close the descriptor
// or die. A plugin call (`blocking`) has nothing else to do while it waits: one
// flock(1) run synchronously waits in the kernel (woken the moment the holder
// lets go), however busy the lock. Otherwise (the flannel daemon has other work
// while it waits) one non-blocking flock(1) run synchronously takes a free lock,
// and a held one is waited for without blocking the event loop.
import * as fs from 'node:fs';
import { CniError, ErrorCode } from '../cni/errors';
import { spawnSyncLean, type SyncRun } from './spawn-sync';

export const DEFAULT_LOCK_TIMEOUT_MS = 10_000;

/** flock(1)'s exit status when the lock is held (-n) or the wait timed out (-w): any other is a failure. */
const HELD = 75;

/**
 * Runs `fn` holding the lock on `lockFile` (created if missing), waiting at
 * most `timeoutMs` for it. `blocking`: the wait blocks this process (a plugin
 * call: no second process, no node:child_process for a lock that is held; a
 * node's pods starting at once find it held most of the time).
 */
export async function withLock<T>(lockFile: string, timeoutMs: number, fn: () => Promise<T>, o: { blocking?: boolean } = {}): Promise<T> {
  let fd: number;
  try {
    fd = fs.openSync(lockFile, fs.constants.O_RDONLY | fs.constants.O_CREAT, 0o600);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new CniError(ErrorCode.IOFailure, `cannot open the lock file ${lockFile}: ${e.code}`, e.message);
  }
  try {
    const flock = findFlock();
    if (o.blocking) lockBlocking(flock, fd, lockFile, timeoutMs);
    else if (!lockNow(flock, fd, lockFile)) await lockWaiting(flock, fd, lockFile, timeoutMs);
    return await fn();
  } finally {
    fs.closeSync(fd); // the only descriptor of this open file now: the lock is released
  }
}

const flockArgs = (wait: string[]) => ['--exclusive', ...wait, '--conflict-exit-code', String(HELD), '3'];

function failure(lockFile: string, status: number | null, signal: string | null | undefined): CniError {
  return new CniError(ErrorCode.IOFailure, `flock(1) could not lock ${lockFile} (${signal ?? `exit status ${status}`})`);
}

/**
 * Where util-linux installs flock(1), looked at before PATH: a runtime may give
 * its plugins a PATH without it, and each miss on a long PATH costs an exception.
 */
const FLOCK_DIRS = ['/usr/bin', '/bin'];

/** The first executable flock in util-linux's own directories, else on PATH. */
function findFlock(): string {
  for (const dir of [...FLOCK_DIRS, ...(process.env.PATH ?? '').split(':').filter(Boolean)]) {
    const file = `${dir}/flock`;
    try {
      fs.accessSync(file, fs.constants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  throw new CniError(ErrorCode.IOFailure, `flock(1) not found in ${FLOCK_DIRS.join(', ')} or PATH: the lock needs util-linux`);
}

/** The timeout flags of a wait of at most `timeoutMs` (0: do not wait). */
const waitArgs = (timeoutMs: number) => (timeoutMs > 0 ? ['--timeout', String(timeoutMs / 1000)] : ['--nonblock']);

const timedOut = (lockFile: string, timeoutMs: number) =>
  new CniError(ErrorCode.TryAgainLater, `timed out after ${timeoutMs} ms waiting for the lock ${lockFile}`, 'another call holds it');

/** Takes the lock, waiting for it in one flock(1) run synchronously (this process blocks meanwhile). */
function lockBlocking(flock: string, fd: number, lockFile: string, timeoutMs: number): void {
  let r: SyncRun;
  try {
    r = spawnSyncLean(flock, flockArgs(waitArgs(timeoutMs)), { env: {}, extraFds: [fd] });
  } catch (err) {
    throw new CniError(ErrorCode.IOFailure, `cannot run ${flock} (${(err as NodeJS.ErrnoException).code})`);
  }
  if (r.stderr) process.stderr.write(r.stderr);
  if (r.status === HELD) throw timedOut(lockFile, timeoutMs);
  if (r.status !== 0) throw failure(lockFile, r.status, r.signal);
}

/**
 * One non-blocking attempt; false when someone holds the lock. flock(1) runs
 * synchronously without node:child_process (util/spawn-sync.ts): loading it
 * costs ~2 ms per call, 4 ms per ADD+DEL (measured), more than everything
 * else the lock costs.
 */
function lockNow(flock: string, fd: number, lockFile: string): boolean {
  let r: SyncRun;
  try {
    r = spawnSyncLean(flock, flockArgs(['--nonblock']), { env: {}, extraFds: [fd] });
  } catch (err) {
    throw new CniError(ErrorCode.IOFailure, `cannot run ${flock} (${(err as NodeJS.ErrnoException).code})`);
  }
  if (r.stderr) process.stderr.write(r.stderr);
  if (r.status === 0) return true;
  if (r.status === HELD) return false;
  throw failure(lockFile, r.status, r.signal);
}

/** Waits for the lock in flock(1), at most `timeoutMs`. */
async function lockWaiting(flock: string, fd: number, lockFile: string, timeoutMs: number): Promise<void> {
  // require, not import(): the bundle is compiled in a vm context without an ESM loader.
  const { spawn } = require('node:child_process') as typeof import('node:child_process');
  return new Promise((resolve, reject) => {
    const child = spawn(flock, flockArgs(waitArgs(timeoutMs)), { stdio: ['ignore', 'ignore', 'inherit', fd] });
    child.on('error', (err) => reject(new CniError(ErrorCode.IOFailure, `cannot run ${flock}: ${err.message}`)));
    child.on('close', (status, signal) => {
      if (status === 0) resolve();
      else if (status === HELD) reject(timedOut(lockFile, timeoutMs));
      else reject(failure(lockFile, status, signal));
    });
  });
}
