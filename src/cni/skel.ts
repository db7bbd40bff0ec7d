// The process boundary of every plugin: read the invocation and config,
// dispatch the command, print the result or the error object, pick the exit code.
import { fstatSync, readFileSync, writeSync } from 'node:fs';
import { CniError, ErrorCode, asCniError } from './errors';
import { Command, Invocation, readInvocation } from './env';
import { NetConf, configVersion, decodeJson, parseNetConf } from './config';
import { Result, formatResult } from './result';
import { COMMAND_MIN_VERSION, LATEST_VERSION, SUPPORTED_VERSIONS, atLeast, isSupported } from './version';
import { checkKnownArgs } from './args';

export interface Request {
  inv: Invocation;
  conf: NetConf;
  /** The config exactly as received, for delegation. */
  stdin: string;
}

export interface PluginHandlers {
  /** Plugin name for log lines. */
  name: string;
  /** CNI_ARGS keys this plugin understands; others need IgnoreUnknown. */
  knownArgs: readonly string[];
  add(req: Request): Promise<Result>;
  del(req: Request): Promise<void>;
  check(req: Request): Promise<void>;
  gc(req: Request): Promise<void>;
  status(req: Request): Promise<void>;
}

export interface Output {
  stdout: string;
  exitCode: number;
}

function readStdin(): string {
  try {
    return readFileSync(0, 'utf8');
  } catch {
    return ''; // closed or absent stdin reads as empty; decoding then says what is wrong
  }
}

const print = (obj: unknown) => JSON.stringify(obj, null, 4) + '\n';

/** Runs one CNI invocation and returns what to print; never throws. */
export async function handle(plugin: PluginHandlers, env: NodeJS.ProcessEnv, stdin: () => string): Promise<Output> {
  let version = LATEST_VERSION;
  try {
    const inv = readInvocation(env);
    if (inv.command === 'VERSION') return { stdout: print(versionInfo(stdin)), exitCode: 0 };
    const raw = stdin();
    const conf = parseNetConf(raw);
    version = conf.cniVersion;
    requireCommandAllowed(inv.command, version);
    checkKnownArgs(inv.args, plugin.knownArgs);
    const req: Request = { inv, conf, stdin: raw };
    switch (inv.command) {
      case 'ADD':
        return { stdout: print(formatResult(await plugin.add(req), version)), exitCode: 0 };
      case 'DEL':
        await plugin.del(req);
        break;
      case 'CHECK':
        await plugin.check(req);
        break;
      case 'GC':
        await plugin.gc(req);
        break;
      case 'STATUS':
        await plugin.status(req);
        break;
    }
    return { stdout: '', exitCode: 0 };
  } catch (err) {
    const e = asCniError(err);
    const stack = e.cause instanceof Error ? e.cause.stack : undefined;
    process.stderr.write(`${plugin.name}: ${e.message}${e.details ? ` (${e.details})` : ''}\n${stack ? stack + '\n' : ''}`);
    return { stdout: print(e.toJSON(version)), exitCode: 1 };
  }
}

function requireCommandAllowed(command: Command, version: string): void {
  const min = COMMAND_MIN_VERSION[command];
  if (!atLeast(version, min)) {
    throw new CniError(ErrorCode.IncompatibleVersion, `config version ${version} does not allow ${command} (needs ${min} or later)`);
  }
}

/**
 * VERSION answers whatever stdin holds: an optional config whose cniVersion,
 * when supported, is echoed; anything else (nothing, a terminal, garbage)
 * gets the latest version, as the reference plugins ignore stdin here.
 */
function versionInfo(stdin: () => string): Record<string, unknown> {
  let cniVersion: string = LATEST_VERSION;
  if (!stdinIsTerminal()) {
    try {
      const asked = configVersion(decodeJson(stdin()));
      if (isSupported(asked)) cniVersion = asked;
    } catch {
      // not a config: the latest version it is
    }
  }
  return { cniVersion, supportedVersions: SUPPORTED_VERSIONS };
}

/** node:tty would load net and the stream machinery (~3 ms) just to ask this. */
function stdinIsTerminal(): boolean {
  try {
    return fstatSync(0).isCharacterDevice();
  } catch {
    return false;
  }
}

/** Entry point for a plugin executable in CNI mode. */
export async function runCni(plugin: PluginHandlers): Promise<never> {
  const out = await handle(plugin, process.env, readStdin);
  writeAll(1, out.stdout);
  process.exit(out.exitCode);
}

/** writeSync may write part of a buffer to a pipe; loop until it is all out. */
function writeAll(fd: number, text: string): void {
  const buf = Buffer.from(text);
  for (let off = 0; off < buf.length; ) off += writeSync(fd, buf, off);
}
