// /healthz and /readyz (src/flannel/daemon/healthz.ts) over real HTTP on 127.0.0.1,
// answering from a stand-in for the daemon.
import { afterEach, describe, expect, it } from 'vitest';
import { get as httpGet } from 'node:http';
import { Socket, connect } from 'node:net';
import { HealthServer, PER_SOURCE, serveHealth } from '../../../../src/flannel/daemon/healthz';
import { waitFor } from '../../../support/wait';

describe('health endpoints', () => {
  let server: HealthServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });
  const get = async (path: string, method = 'GET') => {
    const res = await fetch(`http://127.0.0.1:${server!.port}${path}`, { method });
    return [res.status, await res.text()];
  };

  it('/healthz and /readyz: 200 "ok", or 503 "not ready: <reason>" on one line; anything else 404', async () => {
    let live: string | undefined;
    let ready: string | undefined = 'starting: no lease yet';
    server = await serveHealth({ ip: '127.0.0.1', port: 0 }, { live: () => live, ready: () => ready });
    expect(await get('/healthz')).toEqual([200, 'ok\n']);
    expect(await get('/readyz')).toEqual([503, 'not ready: starting: no lease yet\n']);
    ready = undefined;
    expect(await get('/readyz')).toEqual([200, 'ok\n']);
    expect(await get('/healthz?verbose')).toEqual([200, 'ok\n']);
    live = 'VTEP flannel.1 not up\nsecond line\u2028third';
    expect(await get('/healthz')).toEqual([503, 'not ready: VTEP flannel.1 not up second line third\n']);
    live = 'x'.repeat(5000);
    expect(await get('/healthz')).toEqual([503, `not ready: ${'x'.repeat(200)}\n`]);
    expect(await get('/healthz', 'HEAD')).toEqual([503, '']);
    expect(await get('/nothing')).toEqual([404, 'not found\n']);
    expect(await get('/constructor')).toEqual([404, 'not found\n']);
    expect(await get('/healthz', 'POST')).toEqual([405, 'method not allowed\n']);
  });

  it('every answer carries one Date header, an IMF-fixdate of now (RFC 9110), from our own formatter', async () => {
    server = await serveHealth({ ip: '127.0.0.1', port: 0 }, { live: () => undefined, ready: () => 'starting' });
    for (const path of ['/healthz', '/readyz', '/nothing']) {
      const before = Math.floor(Date.now() / 1000) * 1000;
      const raw = await new Promise<string[]>((resolve, reject) =>
        httpGet(`http://127.0.0.1:${server!.port}${path}`, (res) => {
          res.resume();
          resolve(res.rawHeaders);
        }).on('error', reject),
      );
      const dates = raw.filter((_, i) => i % 2 === 1 && raw[i - 1].toLowerCase() === 'date'); // rawHeaders: name, value, name, value ...
      expect(dates).toHaveLength(1);
      expect(dates[0]).toMatch(/^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$/);
      const at = Date.parse(dates[0]);
      expect(at).toBeGreaterThanOrEqual(before);
      expect(at).toBeLessThanOrEqual(Date.now());
    }
  });

  it('a source that throws is a 503 without its message', async () => {
    server = await serveHealth({ ip: '127.0.0.1', port: 0 }, { live: () => { throw new Error('etcd http://10.0.0.1:2379 unreachable'); }, ready: () => undefined });
    expect(await get('/healthz')).toEqual([503, 'not ready: cannot tell\n']);
  });

  it('/metrics: the registry\'s text, as Prometheus reads it; no registry, no route', async () => {
    server = await serveHealth({ ip: '127.0.0.1', port: 0 }, { live: () => undefined, ready: () => undefined }, { render: () => 'flannel_peers{family="ipv4"} 3\n' });
    const res = await fetch(`http://127.0.0.1:${server.port}/metrics`);
    expect([res.status, res.headers.get('content-type'), await res.text()]).toEqual([200, 'text/plain; version=0.0.4; charset=utf-8', 'flannel_peers{family="ipv4"} 3\n']);
    await server.close();
    server = await serveHealth({ ip: '127.0.0.1', port: 0 }, { live: () => undefined, ready: () => undefined });
    expect((await get('/metrics'))[0]).toBe(404);
  });

  it('a port in use is an error at start', async () => {
    server = await serveHealth({ ip: '127.0.0.1', port: 0 }, { live: () => undefined, ready: () => undefined });
    await expect(serveHealth({ ip: '127.0.0.1', port: server.port }, { live: () => undefined, ready: () => undefined })).rejects.toThrow(/EADDRINUSE/);
  });
});

describe('health endpoints under a stranger\'s connections', () => {
  let server: HealthServer | undefined;
  const sockets: Socket[] = [];
  afterEach(async () => {
    for (const s of sockets.splice(0)) s.destroy();
    await server?.close();
    server = undefined;
  });
  const open = (localAddress = '127.0.0.1') =>
    new Promise<Socket>((resolve, reject) => {
      const s = connect({ host: '127.0.0.1', port: server!.port, localAddress }, () => resolve(s));
      s.on('error', reject);
      s.resume(); // flowing: a paused socket that reads nothing may never see the server's close
      sockets.push(s);
    });
  const closed = (s: Socket) => s.destroyed || s.readyState === 'closed';
  /** GET /healthz from `localAddress` (another loopback address is another source). */
  const probe = (localAddress: string) =>
    new Promise<number>((resolve, reject) => {
      const req = httpGet({ host: '127.0.0.1', port: server!.port, path: '/healthz', localAddress, agent: false }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
    });
  const start = async () => (server = await serveHealth({ ip: '127.0.0.1', port: 0 }, { live: () => undefined, ready: () => undefined }));

  it('closes a connection that sends nothing, and one that sends its headers too slowly (408), within seconds', async () => {
    await start();
    const idle = await open();
    const slow = await open();
    slow.write('GET /healthz HTTP/1.1\r\nHost: x\r\n');
    let answer = '';
    slow.on('data', (b: Buffer) => (answer += b.toString()));
    const drip = setInterval(() => slow.writable && slow.write('X-Slow: 1\r\n'), 100);
    try {
      await waitFor('the idle connection to be closed', () => closed(idle));
      await waitFor('the slow one to be closed', () => closed(slow));
    } finally {
      clearInterval(drip);
    }
    expect(answer).toMatch(/^HTTP\/1.1 408 /);
  });

  it(`lets one source hold at most ${PER_SOURCE} connections; another source is still answered`, async () => {
    await start();
    const held = await Promise.all(Array.from({ length: PER_SOURCE }, () => open('127.0.0.1')));
    const extra = await open('127.0.0.1').catch(() => undefined);
    if (extra) await waitFor('the connection past the limit to be closed', () => closed(extra));
    expect(held.every((s) => !closed(s))).toBe(true);
    expect(await probe('127.0.0.2')).toBe(200);
  });
});
