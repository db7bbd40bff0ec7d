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
//
// Anyone who can reach the port must not be able to keep the kubelet's
// probes out (a liveness probe that fails restarts the daemon): idle or slow
// connections are closed within two seconds, one source address may hold at
// most PER_SOURCE connections, and the listener as a whole MAX_CONNECTIONS.
import { Server, createServer } from 'node:http';
import { httpDate } from '../../util/utc-time';

/** Connections one source address may hold at once (a kubelet needs one or two). */
export const PER_SOURCE = 64;
/** Connections the listener holds at once: far more than one source may fill. */
export const MAX_CONNECTIONS = 4096;
/** A connection that sends nothing for this long is closed (Node's socket timeout). */
const IDLE_MS = 1500;
/** A request whose headers (whole request) are not in within this long gets 408 and is closed. */
const HEADERS_MS = 1500;
const REQUEST_MS = 2000;

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
  // Node checks the header and request timeouts every connectionsCheckingInterval (30 s by default)
  const server = createServer({ connectionsCheckingInterval: 500, headersTimeout: HEADERS_MS, requestTimeout: REQUEST_MS, keepAliveTimeout: IDLE_MS }, (req, res) => {
    // The Date header from our own formatter: Node's would set up V8's date cache and ICU's time zone (utc-time.ts)
    res.sendDate = false;
    res.setHeader('date', httpDate(Date.now()));
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
  server.timeout = IDLE_MS; // a connection that never sends a byte: the header timeout does not cover it
  server.maxConnections = MAX_CONNECTIONS;
  limitPerSource(server, PER_SOURCE);
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

/** Closes a new connection at once when its source address already holds `limit`. */
function limitPerSource(server: Server, limit: number): void {
  const held = new Map<string, number>();
  server.on('connection', (socket) => {
    const source = socket.remoteAddress ?? '';
    const n = (held.get(source) ?? 0) + 1;
    if (n > limit) return void socket.destroy();
    held.set(source, n);
    socket.once('close', () => {
      const left = (held.get(source) ?? 1) - 1;
      if (left > 0) held.set(source, left);
      else held.delete(source);
    });
  });
}
