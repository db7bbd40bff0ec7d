// The invocation: CNI_* environment variables, checked the way the spec says.
import { CniError, ErrorCode } from './errors';
import { CniArgs, parseCniArgs } from './args';
import { CONTROL_CHARACTER, ifnameProblem } from '../net/ifname';

export const COMMANDS = ['ADD', 'DEL', 'CHECK', 'VERSION', 'GC', 'STATUS'] as const;
export type Command = (typeof COMMANDS)[number];

export interface Invocation {
  command: Command;
  containerId: string;
  netns: string;
  ifname: string;
  args: CniArgs;
  /** CNI_ARGS as the runtime gave it, passed on unchanged to delegates. */
  rawArgs: string;
  path: string[];
}

/** The variables the spec has a runtime set; CNI_TS_* and the like are this project's own. */
const SPEC_VARIABLES = ['CNI_COMMAND', 'CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_ARGS', 'CNI_PATH'];

/**
 * Whether this process was started as a CNI plugin rather than by a person.
 * Runtimes run a plugin with no arguments; an operator runs a subcommand or
 * option, which is always the CLI whatever the environment holds (a CNI_PATH
 * left exported in a shell). Without arguments, any spec variable makes a
 * plugin call, so a runtime that forgot CNI_COMMAND gets an error object, not
 * a help page.
 */
export function isCniInvocation(env: NodeJS.ProcessEnv, args: readonly string[]): boolean {
  return args.length === 0 && SPEC_VARIABLES.some((name) => name in env);
}

const REQUIRED: Record<Command, readonly string[]> = {
  ADD: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME'],
  CHECK: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME'],
  DEL: ['CNI_CONTAINERID', 'CNI_IFNAME'],
  VERSION: [],
  GC: [],
  STATUS: [],
};

const NAME_RE = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

export function validateContainerId(id: string): void {
  if (!NAME_RE.test(id)) {
    throw new CniError(
      ErrorCode.InvalidEnvironment,
      `CNI_CONTAINERID ${JSON.stringify(id)} is invalid: it must match ${NAME_RE.source}`,
    );
  }
}

/** Interface names as the kernel accepts them (IFNAMSIZ - 1 bytes, no '/', ':' or whitespace). */
export function validateIfname(name: string, what = 'CNI_IFNAME'): void {
  const problem = ifnameProblem(name);
  if (problem) throw new CniError(ErrorCode.InvalidEnvironment, `${what} ${JSON.stringify(name)} is invalid: ${problem}`);
}

export function readInvocation(env: NodeJS.ProcessEnv): Invocation {
  const command = env.CNI_COMMAND ?? '';
  if (!(COMMANDS as readonly string[]).includes(command)) {
    throw new CniError(
      ErrorCode.InvalidEnvironment,
      command === '' ? 'CNI_COMMAND is not set' : `CNI_COMMAND ${JSON.stringify(command)} is unknown`,
      `expected one of ${COMMANDS.join(', ')}`,
    );
  }
  const cmd = command as Command;
  const missing = REQUIRED[cmd].filter((name) => !env[name]);
  if (missing.length > 0) {
    throw new CniError(ErrorCode.InvalidEnvironment, `required environment variables missing for ${cmd}: ${missing.join(', ')}`);
  }
  const inv: Invocation = {
    command: cmd,
    containerId: env.CNI_CONTAINERID ?? '',
    netns: env.CNI_NETNS ?? '',
    ifname: env.CNI_IFNAME ?? '',
    rawArgs: env.CNI_ARGS ?? '',
    args: parseCniArgs(env.CNI_ARGS),
    path: (env.CNI_PATH ?? '').split(':').filter(Boolean),
  };
  if (inv.containerId) validateContainerId(inv.containerId);
  // a path, passed to nsenter and ip: any path the kernel takes, but no control character
  if (CONTROL_CHARACTER.test(inv.netns)) throw new CniError(ErrorCode.InvalidEnvironment, `CNI_NETNS ${JSON.stringify(inv.netns)} is invalid: it contains a control character`);
  if (inv.ifname) validateIfname(inv.ifname);
  return inv;
}
