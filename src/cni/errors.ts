// The one error type of the project: every failure that reaches the process
// boundary is a CniError, printed as the spec's error object.

/** Error codes from the CNI specification (SPEC.md, "Error"). */
export const ErrorCode = {
  IncompatibleVersion: 1,
  UnsupportedField: 2,
  UnknownContainer: 3,
  InvalidEnvironment: 4,
  IOFailure: 5,
  DecodingFailure: 6,
  InvalidNetworkConfig: 7,
  TryAgainLater: 11,
  PluginNotAvailable: 50,
  LimitedConnectivity: 51,
  Internal: 999,
} as const;

export type ErrorCodeValue = (typeof ErrorCode)[keyof typeof ErrorCode];

export class CniError extends Error {
  constructor(
    readonly code: number,
    msg: string,
    readonly details = '',
  ) {
    super(msg);
    this.name = 'CniError';
  }

  toJSON(cniVersion: string): Record<string, unknown> {
    const out: Record<string, unknown> = { cniVersion, code: this.code, msg: this.message };
    if (this.details) out.details = this.details;
    return out;
  }
}

/** Wraps anything thrown into a CniError; unexpected errors become code 999 with the cause in details. */
export function asCniError(err: unknown): CniError {
  if (err instanceof CniError) return err;
  const e = err as NodeJS.ErrnoException;
  if (e && typeof e === 'object' && typeof e.code === 'string' && e.syscall) {
    return new CniError(ErrorCode.IOFailure, `${e.syscall} ${e.path ?? ''}: ${e.code}`.trim(), e.message);
  }
  const message = err instanceof Error ? err.message : String(err);
  const wrapped = new CniError(ErrorCode.Internal, message, err instanceof Error ? `${err.name}: ${err.message}` : '');
  wrapped.cause = err; // the stack goes to stderr, never into the object on stdout
  return wrapped;
}

export const invalidConfig = (msg: string, details = '') =>
  new CniError(ErrorCode.InvalidNetworkConfig, msg, details);
