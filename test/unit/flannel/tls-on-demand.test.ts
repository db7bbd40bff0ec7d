// The Kubernetes client and the etcd client load node:tls (and with it
// OpenSSL's ~4 MiB) only for an https:// server: an etcd on plain HTTP, as
// flannel's default endpoint is, costs the daemon none of it. Run in a child
// Node of its own (vitest itself has TLS loaded), with the clients bundled
// into it: each talks to a plain HTTP server in the child, then the child
// reports which of Node's modules it loaded (process.moduleLoadList).
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { buildSync } from 'esbuild';
import { describe, expect, it } from 'vitest';

const ROOT = join(__dirname, '../../..');

/** Runs `body` (after the clients are imported and an HTTP server answers on `url`; `watchCame` resolves once a watch reached it) and returns Node's modules loaded by its end. */
function modulesLoadedBy(body: string): string[] {
  const contents = `
    import http from 'node:http';
    import { KubeClient } from ${JSON.stringify(join(ROOT, 'src/flannel/kube/client.ts'))};
    import { NODES } from ${JSON.stringify(join(ROOT, 'src/flannel/kube/resource.ts'))};
    import { EtcdHttp } from ${JSON.stringify(join(ROOT, 'src/flannel/store/etcd-http.ts'))};
    let watched;
    const watchCame = new Promise((r) => (watched = r));
    const server = http.createServer((req, res) => {
      res.setHeader('content-type', 'application/json');
      if (req.url.startsWith('/v3/')) return res.end(JSON.stringify({ header: { revision: '7' }, kvs: [] }));
      if (req.url.includes('watch=')) { res.write(''); watched(); return; } // a watch: the answer begins, nothing comes
      res.end(JSON.stringify({ kind: 'NodeList', apiVersion: 'v1', metadata: { resourceVersion: '5' }, items: [] }));
    });
    server.listen(0, '127.0.0.1', async () => {
      const url = 'http://127.0.0.1:' + server.address().port;
      try {
        ${body}
      } finally {
        server.closeAllConnections();
        server.close();
      }
      console.log(JSON.stringify(process.moduleLoadList.filter((m) => m.startsWith('NativeModule ')).map((m) => m.slice(13))));
    });`;
  const program = buildSync({ stdin: { contents, resolveDir: ROOT, loader: 'ts' }, bundle: true, platform: 'node', format: 'cjs', write: false }).outputFiles[0].text;
  const r = spawnSync(process.execPath, ['-e', program], { encoding: 'utf8', env: {}, timeout: 20_000 });
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout);
}

describe('TLS only for https:// servers', () => {
  it('the Kubernetes client lists and watches a plain HTTP server without loading node:tls or node:https', () => {
    const loaded = modulesLoadedBy(`
      const client = new KubeClient({ server: url, description: 'test' });
      const list = await client.list(NODES);
      if (list.resourceVersion !== '5') throw new Error('no list');
      const w = client.watch(NODES, '5', () => {}, 60);
      await watchCame; // the watch's own connection is open and asked
      w.stop();
      client.close();`);
    expect(loaded).toContain('_http_client'); // it did talk HTTP
    expect(loaded).not.toContain('tls');
    expect(loaded).not.toContain('_tls_wrap');
    expect(loaded).not.toContain('https');
  });

  it('the etcd client reads a plain HTTP endpoint without loading node:tls or node:https', () => {
    const loaded = modulesLoadedBy(`
      const etcd = new EtcdHttp({ endpoints: [url], timeoutMs: 5000 });
      const r = await etcd.range('/coreos.com/network/subnets/');
      if (r.revision !== '7') throw new Error('no range');
      etcd.close();`);
    expect(loaded).toContain('_http_client');
    expect(loaded).not.toContain('tls');
    expect(loaded).not.toContain('https');
  });

  it('an https:// server loads them (the check can tell): the Kubernetes client and the etcd client, each', () => {
    const kube = modulesLoadedBy(`
      const client = new KubeClient({ server: 'https://127.0.0.1:1', description: 'test' });
      await client.list(NODES).catch(() => {});
      client.close();`);
    expect(kube).toContain('tls');
    expect(kube).toContain('https');
    const etcd = modulesLoadedBy(`
      const etcd = new EtcdHttp({ endpoints: ['https://127.0.0.1:1'], timeoutMs: 5000, tls: { ca: Buffer.from('') } });
      await etcd.range('/x').catch(() => {});
      etcd.close();`);
    expect(etcd).toContain('https');
  });
});
