// Shared helpers for integration tests: run a plugin bundle exactly as a
// runtime does (env + config on stdin), and make throwaway state.
import { spawn, execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const ROOT = resolve(__dirname, '../..');
export const OUR_BIN = join(ROOT, 'bin');
export const GO_BIN = '/usr/lib/cni';

export interface PluginRun {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout parsed as JSON, when it is JSON. */
  json: any;
}

export interface PluginEnv {
  CNI_COMMAND: string;
  CNI_CONTAINERID?: string;
  CNI_NETNS?: string;
  CNI_IFNAME?: string;
  CNI_ARGS?: string;
  CNI_PATH?: string;
  [key: string]: string | undefined;
}

/** Runs argv with exactly `env` and `stdin`; resolves with the outcome (never rejects on an exit code). */
export function runProcess(argv: readonly string[], env: Record<string, string>, stdin: string): Promise<PluginRun> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(argv[0], argv.slice(1), { env, stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    child.on('error', reject);
    child.on('close', (code) => {
      const stdout = Buffer.concat(out).toString();
      let json: unknown;
      try {
        json = stdout.trim() ? JSON.parse(stdout) : undefined;
      } catch {
        json = undefined;
      }
      resolvePromise({ code: code ?? -1, stdout, stderr: Buffer.concat(err).toString(), json });
    });
    child.stdin.on('error', () => {});
    child.stdin.end(stdin);
  });
}

/** The environment a runtime gives a plugin: PATH and the CNI_* values, nothing else. */
function cleanEnv(env: PluginEnv): Record<string, string> {
  const full: Record<string, string> = { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' };
  for (const [k, v] of Object.entries(env)) if (v !== undefined) full[k] = v;
  return full;
}

/** Runs a plugin executable with a clean CNI environment and `conf` on stdin. */
export function runPlugin(file: string, env: PluginEnv, conf: unknown): Promise<PluginRun> {
  return runProcess([file], cleanEnv(env), typeof conf === 'string' ? conf : JSON.stringify(conf));
}

/** The same, with the plugin itself running inside the network namespace at `nsPath` (a test's "host"). */
export function runPluginIn(nsPath: string, file: string, env: PluginEnv, conf: unknown): Promise<PluginRun> {
  return runProcess(['nsenter', `--net=${nsPath}`, '--', file], cleanEnv(env), typeof conf === 'string' ? conf : JSON.stringify(conf));
}

/** A temporary directory removed by the returned cleanup function. */
export function tempDir(prefix: string): { path: string; remove: () => void } {
  const path = mkdtempSync(join(tmpdir(), `${prefix}-`));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

/** Runs a command synchronously (test set-up only), returning stdout. */
export function sh(argv: string[], input?: string): string {
  return execFileSync(argv[0], argv.slice(1), { input, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
}

/** Runs argv inside the network namespace at `nsPath` with env and stdin; resolves with the outcome (never rejects on exit codes). */
export function runIn(nsPath: string, argv: readonly string[], env: Record<string, string> = {}, stdin = ''): Promise<PluginRun> {
  return runProcess(['nsenter', `--net=${nsPath}`, '--', ...argv], { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin', ...env }, stdin);
}

/** Removes a named network namespace; one that is not there is fine. */
export function removeNetns(name: string): void {
  try {
    sh(['ip', 'netns', 'del', name]);
  } catch {
    // not there
  }
}

/**
 * The one way tests make a named network namespace: fresh (a leftover of a
 * crashed run is removed first), with lo up; `remove` is safe to call twice.
 */
export function makeNetns(name: string): { name: string; path: string; remove: () => void } {
  removeNetns(name);
  sh(['ip', 'netns', 'add', name]);
  sh(['ip', '-n', name, 'link', 'set', 'lo', 'up']);
  return {
    name,
    path: `/var/run/netns/${name}`,
    remove: () => removeNetns(name),
  };
}

/**
 * Whether the private memory of process `pid` (its heap and anonymous mappings, where V8 keeps the
 * sources it compiled; not the executable's file, which holds every bundle) contains `text`: what
 * code a daemon has loaded, seen from outside. Read from /proc/<pid>/mem (root).
 */
export function memoryHolds(pid: number, text: string): boolean {
  const needle = Buffer.from(text);
  const fd = fs.openSync(`/proc/${pid}/mem`, 'r');
  try {
    for (const line of fs.readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n')) {
      const m = /^([0-9a-f]+)-([0-9a-f]+) (r)\S* \S+ \S+ (\d+)\s*(.*)$/.exec(line);
      if (!m || m[4] !== '0' || (m[5] !== '' && m[5] !== '[heap]')) continue; // anonymous mappings and the heap only
      const start = BigInt(`0x${m[1]}`);
      const size = Number(BigInt(`0x${m[2]}`) - start);
      const buf = Buffer.alloc(size);
      try {
        fs.readSync(fd, buf, 0, size, start);
      } catch {
        continue; // a guard page, a mapping gone meanwhile
      }
      if (buf.includes(needle)) return true;
    }
    return false;
  } finally {
    fs.closeSync(fd);
  }
}
