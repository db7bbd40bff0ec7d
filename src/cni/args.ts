// CNI_ARGS: "K=V;K=V" pairs from the runtime. Like Go's types.LoadArgs, a key
// the plugin does not know is an error unless IgnoreUnknown is set.
import { CniError, ErrorCode } from './errors';

export type CniArgs = ReadonlyMap<string, string>;

export function parseCniArgs(raw: string | undefined): CniArgs {
  const args = new Map<string, string>();
  if (!raw) return args;
  for (const pair of raw.split(';')) {
    if (pair === '') continue;
    const eq = pair.indexOf('=');
    if (eq <= 0) {
      throw new CniError(ErrorCode.InvalidEnvironment, `CNI_ARGS: invalid pair ${JSON.stringify(pair)}, expected KEY=VALUE`);
    }
    args.set(pair.slice(0, eq), pair.slice(eq + 1));
  }
  return args;
}

const TRUE_VALUES = new Set(['1', 'true', 'True', 'TRUE']);
const FALSE_VALUES = new Set(['0', 'false', 'False', 'FALSE']);

/** Fails on keys outside `known` unless the runtime set IgnoreUnknown. */
export function checkKnownArgs(args: CniArgs, known: readonly string[]): void {
  const ignore = args.get('IgnoreUnknown');
  if (ignore !== undefined && !TRUE_VALUES.has(ignore) && !FALSE_VALUES.has(ignore)) {
    throw new CniError(ErrorCode.InvalidEnvironment, `CNI_ARGS: IgnoreUnknown=${JSON.stringify(ignore)} is not a boolean`);
  }
  if (ignore !== undefined && TRUE_VALUES.has(ignore)) return;
  const unknown = [...args.keys()].filter((k) => k !== 'IgnoreUnknown' && !known.includes(k));
  if (unknown.length > 0) {
    throw new CniError(
      ErrorCode.InvalidEnvironment,
      `CNI_ARGS: unknown keys ${unknown.join(', ')} (set IgnoreUnknown=1 to ignore them)`,
    );
  }
}
