// A failed kernel-facing step (ip, nsenter, iptables, nft) as the CNI error
// the bridge's commands report.
import { CniError, ErrorCode } from '../cni/errors';

/** A failed kernel-facing step as a CNI error naming the step; the tool's own words go in the message. */
export function kernelError(what: string, err: unknown): CniError {
  if (err instanceof CniError) return err;
  const e = err as NodeJS.ErrnoException;
  if (e?.code === 'ENOENT' && e.syscall?.startsWith('spawn')) {
    return new CniError(ErrorCode.Internal, `${what}: ${e.syscall.replace(/^spawn(Sync)? /, '')} is not installed (not found in PATH)`);
  }
  return new CniError(ErrorCode.Internal, `${what}: ${e?.message ?? String(err)}`);
}

