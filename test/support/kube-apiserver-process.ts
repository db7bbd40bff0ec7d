// Runs the stand-in API server as a child process, optionally inside a
// network namespace, so that "node" namespaces of a test topology can reach
// it over their own links while the test process stays in its own namespace.
// The test drives it through the control socket (a unix socket: it does not
// care about network namespaces) with the same hooks as the in-process server.
import { ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { build } from 'esbuild';
import { HOOK_NAMES, Json, KubeApiHooks, KubeApiServerOptions, type KubeUser } from './kube-apiserver';
import type { TestCA } from './pki';

export interface KubeApiServerProcess extends KubeApiHooks {
  /** The API's URL, as the server sees its own address (reachable from wherever that address is). */
  readonly url: string;
  /** What the process printed on stderr (for a failing test's report). */
  output(): string;
  /** Stops the process and removes its temp dir; safe to call twice. */
  stop(): Promise<void>;
}

/**
 * The stand-in as the cluster tests run it: in the namespace at `netns`, on
 * `ip`:6443 over HTTPS with a certificate of `ca` (for `ip` and
 * kubernetes.default.svc, as a real API server's), client certificates
 * checked against `ca`, and `users` (tokens or certificates).
 */
export function spawnClusterApiServer(netns: string, ip: string, ca: TestCA, users: KubeUser[]): Promise<KubeApiServerProcess> {
  const cert = ca.server('kube-apiserver', [ip], ['kubernetes.default.svc']);
  return spawnKubeApiServer({ netns, host: ip, port: 6443, tls: { cert: cert.certPem, key: cert.keyPem, clientCA: ca.caPem }, users });
}

/**
 * Starts the server as `node <bundle>` (inside the network namespace at
 * `netns` when given, via nsenter); resolves once it listens. `host` must be
 * an address of that namespace.
 */
export async function spawnKubeApiServer(opts: Omit<KubeApiServerOptions, 'controlSocket'> & { netns?: string }): Promise<KubeApiServerProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'kube-apiserver-'));
  const bundle = join(dir, 'kube-apiserver.mjs');
  await build({ entryPoints: [resolve(__dirname, 'kube-apiserver-main.ts')], bundle: true, platform: 'node', format: 'esm', target: 'node20', outfile: bundle, logLevel: 'warning' });
  const controlSocket = join(dir, 'control.sock');
  const { netns, ...serverOpts } = opts;
  writeFileSync(join(dir, 'options.json'), JSON.stringify({ ...serverOpts, controlSocket }), { mode: 0o600 });
  const argv = [process.execPath, bundle, join(dir, 'options.json')];
  const child = netns ? spawn('nsenter', [`--net=${netns}`, '--', ...argv], { stdio: ['ignore', 'pipe', 'pipe'] }) : spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
  let url: string;
  try {
    url = await firstLine(child, () => stderr);
  } catch (err) {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const call = (name: string, args: unknown[]) => controlCall(controlSocket, name, args);
  const hooks = Object.fromEntries(HOOK_NAMES.map((n) => [n, (...args: unknown[]) => call(n, args)])) as unknown as KubeApiHooks;
  return {
    ...hooks,
    url,
    output: () => stderr,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function firstLine(child: ChildProcess, stderr: () => string): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`the stand-in API server did not start within 20 s: ${stderr()}`)), 20_000);
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString();
      const nl = out.indexOf('\n');
      if (nl < 0) return;
      clearTimeout(timer);
      resolvePromise((JSON.parse(out.slice(0, nl)) as { url: string }).url);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`the stand-in API server exited (${code ?? signal}) before listening: ${stderr()}`));
    });
  });
}

function controlCall(socketPath: string, hook: string, args: unknown[]): Promise<any> {
  return new Promise((resolvePromise, reject) => {
    const req = http.request({ socketPath, path: `/_test/${hook}`, method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      let body = '';
      res.on('data', (b: Buffer) => (body += b.toString()));
      res.on('end', () => {
        const parsed = JSON.parse(body) as { result?: Json; message?: string };
        if (res.statusCode === 200) resolvePromise(parsed.result === null ? undefined : parsed.result);
        else reject(new Error(`stand-in API server hook ${hook}: ${res.statusCode} ${parsed.message ?? body}`));
      });
    });
    req.on('error', reject);
    req.end(JSON.stringify(args));
  });
}
