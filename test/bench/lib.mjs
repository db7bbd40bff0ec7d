// Shared bench helpers: timing a child process, medians, the report table, and
// the stand-in API server the daemon's benches run against.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** Runs argv with env and stdin; returns wall milliseconds. Throws on a non-zero exit. */
export function timed(argv, { env = {}, input = '' } = {}) {
  const start = process.hrtime.bigint();
  const r = spawnSync(argv[0], argv.slice(1), { env: { PATH: process.env.PATH, ...env }, input, encoding: 'utf8' });
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  if (r.status !== 0) throw new Error(`${argv.join(' ')} exited ${r.status}: ${r.stdout}${r.stderr}`);
  return ms;
}

/** Peak resident memory (KiB) of one run, via GNU time; undefined when /usr/bin/time is missing. */
export function peakRssKiB(argv, { env = {}, input = '' } = {}) {
  const r = spawnSync('/usr/bin/time', ['-f', '%M', ...argv], { env: { PATH: process.env.PATH, ...env }, input, encoding: 'utf8' });
  if (r.error || r.status !== 0) return undefined;
  const last = r.stderr.trim().split('\n').pop();
  return Number(last);
}

export function median(values) {
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export const fmt = (ms) => `${ms.toFixed(1)} ms`;
export const ratio = (a, b) => `${(a / b).toFixed(2)}x`;

/** Prints rows of cells as an aligned table. */
export function table(rows) {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => String(r[i]).length)));
  for (const r of rows) console.log(r.map((c, i) => String(c).padEnd(widths[i])).join('  ').trimEnd());
}

/**
 * A throwaway CA in `dir` and a certificate it signed for 127.0.0.1 (openssl, argv only; EC P-256):
 * { caFile, cert, key } (the CA's path, the server's PEM texts).
 */
export function serverCertificate(dir) {
  const f = (name) => join(dir, name);
  const openssl = (...args) => {
    const r = spawnSync('openssl', args, { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`openssl ${args[0]}: ${r.stderr}`);
  };
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl('req', '-x509', ...ec, '-keyout', f('ca-key.pem'), '-out', f('ca.pem'), '-days', '2', '-subj', '/CN=cni-ts-bench-ca');
  openssl('req', ...ec, '-keyout', f('api-key.pem'), '-out', f('api.csr'), '-subj', '/CN=kube-apiserver');
  writeFileSync(f('api.ext'), 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  openssl('x509', '-req', '-in', f('api.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca-key.pem'), '-CAcreateserial', '-out', f('api.pem'), '-days', '2', '-extfile', f('api.ext'));
  return { caFile: f('ca.pem'), cert: readFileSync(f('api.pem'), 'utf8'), key: readFileSync(f('api-key.pem'), 'utf8') };
}

/**
 * The stand-in API server (test/support/kube-apiserver.ts) on 127.0.0.1, built
 * into `dir`, run as `[...prefix, node, ...nodeArgs, bundle]` (prefix: e.g.
 * nsenter into a namespace); its hooks called over its control socket. `tls`:
 * serve HTTPS with this certificate and key (PEM texts), as a real API server does.
 */
export async function startStandIn(dir, { prefix = [], nodeArgs = [], historyLimit = 20000, tls } = {}) {
  const bundle = join(dir, 'kube-apiserver.mjs');
  if (!existsSync(bundle)) await build({ entryPoints: [join(root, 'test/support/kube-apiserver-main.ts')], bundle: true, platform: 'node', format: 'esm', target: 'node20', outfile: bundle, logLevel: 'warning' });
  const controlSocket = join(dir, 'control.sock');
  writeFileSync(join(dir, 'api.json'), JSON.stringify({ host: '127.0.0.1', controlSocket, historyLimit, ...(tls ? { tls } : {}) }));
  const argv = [...prefix, process.execPath, ...nodeArgs, bundle, join(dir, 'api.json')];
  const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise((res, rej) => {
    let out = '';
    child.stdout.on('data', (b) => {
      out += b;
      if (out.includes('\n')) res(JSON.parse(out.split('\n')[0]).url);
    });
    child.once('exit', (c) => rej(new Error(`the stand-in API server exited ${c}`)));
  });
  const agent = new http.Agent({ keepAlive: true, maxSockets: 32 });
  const call = (hook, ...args) =>
    new Promise((res, rej) => {
      const req = http.request({ socketPath: controlSocket, agent, path: `/_test/${hook}`, method: 'POST', headers: { 'content-type': 'application/json' } }, (r) => {
        let body = '';
        r.on('data', (b) => (body += b));
        r.on('end', () => (r.statusCode === 200 ? res(JSON.parse(body).result) : rej(new Error(`${hook}: ${r.statusCode} ${body}`))));
      });
      // A kept-alive connection the server closed as it was reused (its idle timeout): the request
      // never reached it, so it is sent again on a new one (Node's documented retry for reusedSocket).
      req.on('error', (err) => (req.reusedSocket && (err.code === 'EPIPE' || err.code === 'ECONNRESET') ? call(hook, ...args).then(res, rej) : rej(err)));
      req.end(JSON.stringify(args));
    });
  return { url, call, stop: () => (child.kill('SIGTERM'), new Promise((r) => child.once('exit', r))), pid: child.pid };
}
