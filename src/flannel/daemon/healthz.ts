// The daemon's health endpoints on --healthz-ip:--healthz-port, the paths
// kube-flannel's manifest probes (liveness /healthz, readiness /readyz):
//   GET /healthz  200 "ok" unless the daemon is stopping, its reconcile loop
//                 has stalled, or the overlay it set up is not in place
//                 (a VTEP down, peers not programmed); then 503
//                 "not ready: <short reason>". Start-up is not a failure here.
//   GET /readyz   the same, and 503 too until start-up has finished
//   GET /metrics  Prometheus text format (metrics.ts), when a registry is given
// Anything else is 404. Each answer is read from what the daemon already
// knows (no command runs, nothing is asked of the lease store), so a probe
// costs a memory read and needs no rate limit. The reasons are short and
// carry no internal text (store addresses, kernel messages): the listener
// is unauthenticated and, as flanneld's, on 0.0.0.0 by default.
import { createServer } from 'node:http';

/** What the endpoints ask (the Daemon): a short reason when not well, undefined when well. */
export interface HealthSource {
  /** Liveness: why the running daemon is not doing its job. */
  live(): string | undefined;
  /** Readiness: why this node's overlay is not in place (start-up included). */
  ready(): string | undefined;
}

export interface HealthServer {
  /** The port it listens on (the one asked for, or the kernel's pick for 0). */
  port: number;
  close(): Promise<void>;
}

/** One line of at most 200 printable ASCII characters. */
const shortReason = (reason: string) => reason.replace(/[^\x20-\x7e]+/g, ' ').slice(0, 200);

/** Listens on `at` and answers from `source`; resolves once listening. */
export async function serveHealth(at: { ip: string; port: number }, source: HealthSource, metrics?: { render(): string }): Promise<HealthServer> {
  // path -> the question it asks; another endpoint of the same listener is one more entry
  const routes: Record<string, () => string | undefined> = {
    '/healthz': () => source.live(),
    '/readyz': () => source.ready(),
  };
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    const reply = (code: number, text: string) => {
      res.writeHead(code, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' });
      res.end(req.method === 'HEAD' ? undefined : `${text}\n`);
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') return reply(405, 'method not allowed');
    if (path === '/metrics' && metrics) {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8', 'cache-control': 'no-store' });
      return res.end(req.method === 'HEAD' ? undefined : metrics.render());
    }
    const ask = Object.hasOwn(routes, path) ? routes[path] : undefined;
    if (!ask) return reply(404, 'not found');
    let problem: string | undefined;
    try {
      problem = ask();
    } catch {
      problem = 'cannot tell';
    }
    return problem === undefined ? reply(200, 'ok') : reply(503, `not ready: ${shortReason(problem)}`);
  });
  // unauthenticated: a slow or greedy client cannot hold the listener
  server.maxConnections = 32;
  server.headersTimeout = 5000;
  server.requestTimeout = 5000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(at.port, at.ip, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  return {
    port: typeof address === 'object' && address ? address.port : at.port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
