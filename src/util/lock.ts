// The per-network lock: proper-lockfile (an atomic mkdir, refreshed while held)
// on the network's directory. Waiting has a deadline: past it the call fails
// with code 11 (try again later) instead of hanging. A lock whose holder was
// killed stops being refreshed and is taken over once it is STALE_MS old.
import lockfile from 'proper-lockfile';
import { CniError, ErrorCode } from '../cni/errors';

/** proper-lockfile's minimum; the holder refreshes the lock every STALE_MS / 2. */
export const STALE_MS = 5000;
export const DEFAULT_LOCK_TIMEOUT_MS = 10_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function withLock<T>(target: string, lockPath: string, timeoutMs: number, fn: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let release: () => void;
  for (let delay = 2; ; delay = Math.min(delay * 2, 64)) {
    try {
      // The sync variant: a call holds the lock for a few ms, and staying off
      // libuv's thread pool saves more start-up than anything async would win.
      release = lockfile.lockSync(target, {
        lockfilePath: lockPath,
        realpath: false,
        stale: STALE_MS,
        onCompromised: (err) => process.stderr.write(`lock ${lockPath} compromised: ${err.message}\n`),
      });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ELOCKED') throw err;
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new CniError(
          ErrorCode.TryAgainLater,
          `timed out after ${timeoutMs} ms waiting for the lock ${lockPath}`,
          `another call holds it; a lock left by a killed process is reclaimed after ${STALE_MS} ms`,
        );
      }
      await sleep(Math.min(left, delay * (0.5 + Math.random())));
    }
  }
  try {
    return await fn();
  } finally {
    release();
  }
}
