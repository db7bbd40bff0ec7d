// The one place that runs the kernel-facing tools (ip, bridge, nsenter, ...)
// and touches /proc/sys. Always argv arrays, never a shell. A namespace is
// entered by path with nsenter, so CNI_NETNS may be a named netns,
// containerd's /run/netns/cni-... or /proc/<pid>/ns/net (batch.ts lets `ip`
// enter a named one itself). Tests swap the
// runner (and the /proc/sys access) to record what would be done.
import * as fs from 'node:fs';

export interface RunResult {
  stdout: string;
  stderr: string;
  code: number;
}

export type Runner = (argv: readonly string[], input?: string) => Promise<RunResult>;

export class CommandError extends Error {
  constructor(
    readonly argv: readonly string[],
    readonly result: RunResult,
    readonly input?: string,
  ) {
    super(`${argv.join(' ')} failed (exit ${result.code}): ${result.stderr.trim() || result.stdout.trim()}`);
    this.name = 'CommandError';
  }
}

// node:child_process is loaded on first use: a plugin that installs the sync
// runner never needs its async machinery (util/spawn-sync.ts).
const spawnRunner: Runner = (argv, input) => {
  const { spawn } = require('node:child_process') as typeof import('node:child_process');
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    child.on('error', reject);
    child.on('close', (code) =>
      resolve({ stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString(), code: code ?? 1 }),
    );
    child.stdin.on('error', () => {});
    child.stdin.end(input ?? '');
  });
};

let runner: Runner = spawnRunner;

/** The runner commands go to now. */
export const currentRunner = (): Runner => runner;

/** Replaces the runner (tests record or fake command lines); returns the previous one. */
export function setRunner(next: Runner): Runner {
  const prev = runner;
  runner = next;
  return prev;
}

/**
 * The plugin's own namespace's /proc/sys: plain file reads and writes (no
 * process; /proc/sys/net answers for the namespace of the process opening it).
 * `path` is relative to /proc/sys and already validated.
 */
export interface ProcSys {
  /** The value, or undefined when there is no such key. */
  read(path: string): string | undefined;
  /** Throws when the key is missing or the write is refused. */
  write(path: string, value: string): void;
}

const fileProcSys: ProcSys = {
  read(path) {
    try {
      return fs.readFileSync(`/proc/sys/${path}`, 'utf8').trim();
    } catch {
      return undefined;
    }
  },
  write(path, value) {
    fs.writeFileSync(`/proc/sys/${path}`, value);
  },
};

let procSys: ProcSys = fileProcSys;

/** Replaces the /proc/sys access beside the runner (tests record sysctls); returns the previous one. */
export function setProcSys(next: ProcSys): ProcSys {
  const prev = procSys;
  procSys = next;
  return prev;
}

/** The current /proc/sys access of the plugin's own namespace. */
export const ownProcSys = (): ProcSys => procSys;

export interface ExecOptions {
  /** Network namespace path to run in; the plugin's own namespace when absent. */
  netns?: string;
  /** Text for the command's stdin (batch input). */
  input?: string;
  /** Exit codes other than 0 that are not failures. */
  allow?: readonly number[];
}

/** argv with the namespace entered by path. */
function inNetns(argv: readonly string[], netns?: string): string[] {
  return netns ? ['nsenter', `--net=${netns}`, '--', ...argv] : [...argv];
}

/** Runs a command; fails with CommandError on an unexpected exit code. */
export async function exec(argv: readonly string[], opts: ExecOptions = {}): Promise<RunResult> {
  const full = inNetns(argv, opts.netns);
  const result = await runner(full, opts.input);
  if (result.code !== 0 && !opts.allow?.includes(result.code)) throw new CommandError(full, result, opts.input);
  return result;
}

/** Runs `ip -json ...` and parses the output. */
export async function ipJson<T = unknown>(args: readonly string[], opts: ExecOptions = {}): Promise<T> {
  const { stdout } = await exec(['ip', '-json', ...args], opts);
  return (stdout.trim() ? JSON.parse(stdout) : []) as T;
}
