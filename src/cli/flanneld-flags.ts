// flanneld's command-line conventions, so that a flanneld command line and
// environment work for `vxlan-flannel daemon` unchanged: Go's boolean flags
// (`--ip-masq`, `--ip-masq=false`), flags given several times (`--iface`),
// and every flag also from FLANNELD_<FLAG> (flagutil.SetFlagsFromEnv: upper
// case, '-' → '_'; the command line wins; an empty variable is unset).
import { Command, InvalidArgumentError, Option } from 'commander';

const TRUE = ['1', 't', 'T', 'TRUE', 'true', 'True'];
const FALSE = ['0', 'f', 'F', 'FALSE', 'false', 'False'];

/** Go's strconv.ParseBool, for `flag`'s messages. */
export function parseGoBool(flag: string) {
  return (value: string): boolean => {
    if (TRUE.includes(value)) return true;
    if (FALSE.includes(value)) return false;
    throw new InvalidArgumentError(`${flag} must be true or false, got ${JSON.stringify(value)}`);
  };
}

/** A Go boolean flag: `--flag` alone is true, `--flag=false` (or `--flag false`) sets it. */
export function boolOption(flag: string, description: string, defaultValue: boolean): Option {
  return new Option(`${flag} [bool]`, description).default(defaultValue).argParser(parseGoBool(flag));
}

/** The parser of a flag that may be given several times: the values in order. */
export const collect = (value: string, previous: string[] | undefined): string[] => [...(previous ?? []), value];

/** The variable flanneld reads `--some-flag` from: FLANNELD_SOME_FLAG. */
export const envName = (prefix: string, long: string) => `${prefix}_${long.replace(/^--/, '').toUpperCase().replace(/-/g, '_')}`;

/**
 * Sets each option of `cmd` that the command line did not give from
 * `<prefix>_<FLAG>` in `env`, through the option's own parser (a bad value
 * is an error naming the variable). Run it before the action (a preAction hook).
 */
export function optionsFromEnv(cmd: Command, prefix: string, env: NodeJS.ProcessEnv = process.env): void {
  for (const opt of cmd.options) {
    if (!opt.long || opt.negate) continue;
    const key = opt.attributeName();
    if (cmd.getOptionValueSource(key) === 'cli') continue;
    const name = envName(prefix, opt.long);
    const value = env[name];
    if (value === undefined || value === '') continue;
    let parsed: unknown = value;
    try {
      // a plain boolean flag (no value on the command line) reads its variable as Go reads a bool
      if (opt.parseArg) parsed = opt.parseArg(value, opt.defaultValue);
      else if (opt.isBoolean()) parsed = parseGoBool(opt.long)(value);
    } catch (err) {
      throw new Error(`${name}: ${(err as Error).message}`);
    }
    cmd.setOptionValueWithSource(key, parsed, 'env');
  }
}
