// The daemon's health endpoints on --healthz-ip:--healthz-port, the paths
// kube-flannel's manifest probes:
//   GET /healthz  200 while this node holds its lease and its VTEPs are up;
//                 503 otherwise, with one line saying why
//   GET /readyz   200 once start-up has finished (firewall rules in place,
//                 subnet.env written), as flanneld's; 503 before and while stopping
//   GET /metrics  Prometheus text format (metrics.ts), when given
// Anything else is 404. Plain node:http, nothing is read from the request
// but its method and path.
import { createServer } from 'node:http';

/** What the endpoints ask (the Daemon). */
export interface HealthSource {
  /** Why the node is not healthy, or undefined when it is. */
  health(): Promise<string | undefined>;
  ready(): boolean;
}

export interface HealthServer {
  /** The port it listens on (the one asked for, or the kernel's pick for 0). */
  port: number;
  close(): Promise<void>;
}

/** Listens on `at` and answers from `source`; resolves once listening. */
export async function serveHealth(at: { ip: string; port: number }, source: HealthSource, metrics?: { render(): string }): Promise<HealthServer> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    const reply = (code: number, text: string) => {
      res.writeHead(code, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' });
      res.end(req.method === 'HEAD' ? undefined : `${text}\n`);
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') return reply(405, 'method not allowed');
    if (path === '/readyz') return source.ready() ? reply(200, 'vxlan-flannel is ready') : reply(503, 'vxlan-flannel is not ready yet');
    if (path === '/metrics' && metrics) {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8', 'cache-control': 'no-store' });
      return res.end(req.method === 'HEAD' ? undefined : metrics.render());
    }
    if (path !== '/healthz') return reply(404, 'not found: /healthz, /readyz');
    source.health().then(
      (problem) => (problem === undefined ? reply(200, 'ok: lease held, VTEPs up') : reply(503, problem.replace(/[\r\n]+/g, ' '))),
      (err) => reply(503, `cannot tell: ${(err as Error).message}`),
    );
  });
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
