// /healthz and /readyz (src/flannel/healthz.ts) over real HTTP on 127.0.0.1,
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

  it('/healthz: 200 while healthy, 503 with the reason on one line; /readyz follows ready(); anything else 404', async () => {
    let problem: string | undefined = 'starting: no lease yet';
    let ready = false;
    server = await serveHealth({ ip: '127.0.0.1', port: 0 }, { health: async () => problem, ready: () => ready });
    expect(await get('/healthz')).toEqual([503, 'starting: no lease yet\n']);
    expect(await get('/readyz')).toEqual([503, 'vxlan-flannel is not ready yet\n']);
    problem = undefined;
    ready = true;
    expect(await get('/healthz')).toEqual([200, 'ok: lease held, VTEPs up\n']);
    expect(await get('/healthz?verbose')).toEqual([200, 'ok: lease held, VTEPs up\n']);
    expect(await get('/readyz')).toEqual([200, 'vxlan-flannel is ready\n']);
    problem = 'VTEP flannel.1 is down\nsecond line';
    expect(await get('/healthz')).toEqual([503, 'VTEP flannel.1 is down second line\n']);
    expect(await get('/healthz', 'HEAD')).toEqual([503, '']);
    expect(await get('/metrics')).toEqual([404, 'not found: /healthz, /readyz\n']);
    expect(await get('/healthz', 'POST')).toEqual([405, 'method not allowed\n']);
  });

  it('a health check that fails is a 503 saying so', async () => {
    server = await serveHealth({ ip: '127.0.0.1', port: 0 }, { health: async () => Promise.reject(new Error('ip: not found')), ready: () => true });
    expect(await get('/healthz')).toEqual([503, 'cannot tell: ip: not found\n']);
  });

  it('/metrics: the registry\'s text, as Prometheus reads it; no registry, no route', async () => {
    server = await serveHealth({ ip: '127.0.0.1', port: 0 }, { health: async () => undefined, ready: () => true }, { render: () => 'flannel_peers{family="ipv4"} 3\n' });
    const res = await fetch(`http://127.0.0.1:${server.port}/metrics`);
    expect([res.status, res.headers.get('content-type'), await res.text()]).toEqual([200, 'text/plain; version=0.0.4; charset=utf-8', 'flannel_peers{family="ipv4"} 3\n']);
    await server.close();
    server = await serveHealth({ ip: '127.0.0.1', port: 0 }, { health: async () => undefined, ready: () => true });
    expect((await get('/metrics'))[0]).toBe(404);
  });

  it('a port in use is an error at start', async () => {
    server = await serveHealth({ ip: '127.0.0.1', port: 0 }, { health: async () => undefined, ready: () => true });
    await expect(serveHealth({ ip: '127.0.0.1', port: server.port }, { health: async () => undefined, ready: () => true })).rejects.toThrow(/EADDRINUSE/);
  });
});
