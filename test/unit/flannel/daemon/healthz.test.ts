// /healthz and /readyz (src/flannel/daemon/healthz.ts) over real HTTP on 127.0.0.1,
// answering from a stand-in for the daemon.
import { afterEach, describe, expect, it } from 'vitest';
import { HealthServer, serveHealth } from '../../../../src/flannel/daemon/healthz';

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
