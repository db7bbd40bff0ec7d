// I/O failures as CNI errors that name the file and the real cause. Node's
// errors for descriptor-based calls (write, fsync) carry no path, which made
// "write : ENOSPC" a message that names nothing.
import { CniError, ErrorCode } from '../cni/errors';

/** "ENOSPC (no space left on device)" from a Node errno error; its message for anything else. */
export function describeFailure(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  if (typeof e?.code !== 'string') return String((err as Error)?.message ?? err);
  const said = /^[A-Z0-9_]+: ([^,]+)/.exec(e.message)?.[1];
  return said ? `${e.code} (${said})` : e.code;
}

/** Code 5: "cannot <action> <path>: ENOSPC (no space left on device)". */
export function ioFailure(action: string, path: string, err: unknown): CniError {
  if (err instanceof CniError) return err;
  return new CniError(ErrorCode.IOFailure, `cannot ${action} ${path}: ${describeFailure(err)}`);
}

/** Runs one filesystem step on `path`, turning its failure into ioFailure(). */
export function onPath<T>(action: string, path: string, step: () => T): T {
  try {
    return step();
  } catch (err) {
    throw ioFailure(action, path, err);
  }
}
