// Delegation: run another CNI plugin found in CNI_PATH with our environment,
// a config on stdin, and read back its result or error object (libcni's invoke).
import { accessSync, constants, statSync } from 'node:fs';
import { join } from 'node:path';
import { CniError, ErrorCode } from './errors';
import type { Command, Invocation } from './env';
import { Result, parseResult } from './result';
import type { Json } from './config';
import { ownPlugin, runInProcess } from './in-process';

const PLUGIN_NAME_RE = /^[a-zA-Z0-9][a-zA-Z0-9_.+-]*$/;

/** Finds an executable plugin by name in the CNI_PATH directories. */
export function findPlugin(type: string, path: readonly string[], field = 'type'): string {
  if (!PLUGIN_NAME_RE.test(type)) {
    throw new CniError(ErrorCode.InvalidNetworkConfig, `field "${field}" ${JSON.stringify(type)} is not a valid plugin name`);
  }
  if (path.length === 0) {
    throw new CniError(ErrorCode.InvalidEnvironment, `CNI_PATH is not set, cannot find plugin "${type}" (field "${field}")`);
  }
  for (const dir of path) {
    const file = join(dir, type);
    try {
      if (statSync(file).isFile()) {
        accessSync(file, constants.X_OK);
        return file;
      }
    } catch {
      // not in this directory
    }
  }
  throw new CniError(
    ErrorCode.InvalidNetworkConfig,
    `plugin "${type}" (field "${field}") not found in CNI_PATH ${path.join(':')}`,
  );
}

/**
 * A delegate's environment: ours, with the invocation's CNI_* values exactly
 * as the runtime gave them (libcni's DelegateAdd does the same), and
 * `command` when given (delegate() sets it per call).
 */
export function delegateEnv(inv: Invocation, command?: Command): NodeJS.ProcessEnv {
  return {
    ...process.env,
    ...(command ? { CNI_COMMAND: command } : {}),
    CNI_CONTAINERID: inv.containerId,
    CNI_NETNS: inv.netns,
    CNI_IFNAME: inv.ifname,
    CNI_ARGS: inv.rawArgs,
    CNI_PATH: inv.path.join(':'),
  };
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/**
 * Runs a plugin executable with `env` and `stdin`, collecting its output.
 * node:child_process is loaded only here: a call that runs no delegate
 * does not pay for it.
 */
export function execPlugin(file: string, env: NodeJS.ProcessEnv, stdin: string): Promise<ExecResult> {
  const { spawn } = require('node:child_process') as typeof import('node:child_process');
  return new Promise((resolve, reject) => {
    const child = spawn(file, [], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const errOut: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => errOut.push(b));
    child.on('error', (err) => reject(new CniError(ErrorCode.Internal, `cannot run plugin ${file}: ${err.message}`)));
    child.on('close', (code, signal) =>
      resolve({
        stdout: Buffer.concat(out).toString(),
        stderr: Buffer.concat(errOut).toString(),
        exitCode: code ?? (signal ? 128 : 1),
      }),
    );
    child.stdin.on('error', () => {}); // a plugin may exit without reading stdin
    child.stdin.end(stdin);
  });
}

export type PluginExec = (file: string, env: NodeJS.ProcessEnv, stdin: string) => Promise<ExecResult>;

let pluginExec: PluginExec = execPlugin;

/**
 * How plugins that are not ours are exec'd: execPlugin unless the executable
 * installs another (a CNI call installs util/plugin-exec-sync.ts: it has
 * nothing else to do while its delegate runs, and node:child_process's
 * machinery costs milliseconds to load).
 */
export function setPluginExec(exec: PluginExec): void {
  pluginExec = exec;
}

/** Execs plugin `file` the way the executable chose (setPluginExec). */
export function execDelegate(file: string, env: NodeJS.ProcessEnv, stdin: string): Promise<ExecResult> {
  return pluginExec(file, env, stdin);
}

export interface DelegateOptions {
  command: Command;
  /** Plugin name, looked up in CNI_PATH. */
  type: string;
  /** The field the name came from, for error messages (e.g. "ipam.type"). */
  field?: string;
  conf: Json;
  env?: NodeJS.ProcessEnv;
  path: readonly string[];
  /** The plugin's file when the caller already found it (findPlugin). */
  file?: string;
}

/**
 * Runs the plugin `file` with `env` and `stdin`: in this process when it is
 * our own build (in-process.ts), exec'd otherwise; the output is the same.
 */
export function runPlugin(file: string, env: NodeJS.ProcessEnv, stdin: string): Promise<ExecResult> {
  const own = ownPlugin(file);
  return own ? runInProcess(own, env, stdin) : execDelegate(file, env, stdin);
}

/**
 * Runs a delegate plugin. A non-zero exit becomes the delegate's own error
 * (code and message kept, the plugin named), so the runtime sees the real cause.
 */
export async function delegate(opts: DelegateOptions): Promise<Result | undefined> {
  const file = opts.file ?? findPlugin(opts.type, opts.path, opts.field);
  const env = { ...(opts.env ?? process.env), CNI_COMMAND: opts.command };
  return readPluginOutput(opts.type, opts.command, await runPlugin(file, env, JSON.stringify(opts.conf)));
}

/**
 * What a plugin's run means: its stderr passed on to ours, its error object
 * (or a crash) as a CniError naming the plugin, and for ADD its parsed result.
 */
export function readPluginOutput(type: string, command: Command, run: ExecResult): Result | undefined {
  if (run.stderr) process.stderr.write(run.stderr);
  if (run.exitCode !== 0) throw delegateError(type, run);
  if (command !== 'ADD') return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(run.stdout);
  } catch {
    throw new CniError(ErrorCode.DecodingFailure, `plugin "${type}" printed a result that is not JSON`, run.stdout.slice(0, 500));
  }
  return parseResult(parsed);
}

function delegateError(type: string, run: ExecResult): CniError {
  try {
    const obj = JSON.parse(run.stdout) as { code?: unknown; msg?: unknown; details?: unknown };
    if (typeof obj.code === 'number' && typeof obj.msg === 'string') {
      return new CniError(obj.code, `${type}: ${obj.msg}`, typeof obj.details === 'string' ? obj.details : '');
    }
  } catch {
    // fall through: not an error object
  }
  const said = (run.stdout || run.stderr).trim().slice(0, 500);
  return new CniError(ErrorCode.Internal, `plugin "${type}" failed with exit code ${run.exitCode}`, said);
}
