// The Kubernetes client (config.ts, client.ts) against the stand-in API server
// running in-process on the loopback, over HTTPS with a CA made for the test:
// in-cluster configuration (token rotation, IPv6 service host), kubeconfig
// files in their usual forms, --kube-api-url, TLS trust (a wrong CA fails
// naming the URL and the CA), and the Node calls the kube subnet manager
// makes, with kube-flannel's RBAC role.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer, Server, Socket } from 'node:net';
import { join } from 'node:path';
import { freePort } from '../../../support/ports';
import { KubeConfigError, KubeConnection, loadKubeConnection, verificationWarning } from '../../../../src/flannel/kube/config';
import { KubeApiError, KubeClient } from '../../../../src/flannel/kube/client';
import { annotationNames, ownNodePatch } from '../../../../src/flannel/kube/annotations';
import { networkUpPatch } from '../../../../src/flannel/kube/network-condition';
import { IP } from '../../../../src/net/ip';
import { KubeApiServer, startKubeApiServer } from '../../../support/kube-apiserver';
import { TestCA } from '../../../support/pki';
import { kubeconfigYaml } from '../../../support/kubeconfig';
import { tempDir } from '../../../integration/helpers';
import { rejected } from '../../../support/expect';
import { waitFor } from '../../../support/wait';
import { PODS } from '../../../../src/flannel/kube/resource';

const FLANNEL_USER = 'system:serviceaccount:kube-flannel:flannel';

describe('the Kubernetes client', () => {
  const tmp = tempDir('kube-client');
  let ca: TestCA;
  let otherCA: TestCA;
  let server: KubeApiServer;
  let server6: KubeApiServer;
  const clients: KubeClient[] = [];
  const client = (conn: KubeConnection, opts = {}) => {
    const c = new KubeClient(conn, opts);
    clients.push(c);
    return c;
  };
  const file = (name: string, text: string) => {
    const path = join(tmp.path, name);
    writeFileSync(path, text, { mode: 0o600 });
    return path;
  };

  beforeAll(async () => {
    ca = new TestCA(join(tmp.path, 'pki'));
    otherCA = new TestCA(join(tmp.path, 'pki-other'), 'other-ca');
    const cert = ca.server('kube-apiserver', ['127.0.0.1', '::1'], ['localhost']);
    const users = [
      { name: 'admin', token: 'admin-token', role: 'admin' as const },
      { name: FLANNEL_USER, token: 'sa-token-1', role: 'flannel' as const },
    ];
    const tls = { cert: cert.certPem, key: cert.keyPem, clientCA: ca.caPem };
    server = await startKubeApiServer({ tls, users });
    server6 = await startKubeApiServer({ host: '::1', tls, users });
    await server.createNode({
      metadata: { name: 'n1', annotations: { 'node.alpha.kubernetes.io/ttl': '0', 'example.com/owner': 'ops' } },
      spec: { podCIDRs: ['10.244.1.0/24', 'fd00:10:244:1::/64'] },
      status: { conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady' }, { type: 'NetworkUnavailable', status: 'True', reason: 'NoRouteCreated' }] },
    });
    await server6.createNode({ metadata: { name: 'v6' } });
  });

  afterAll(async () => {
    for (const c of clients) c.close();
    await server?.stop();
    await server6?.stop();
    tmp.remove();
  });

  /** An in-cluster service account directory with `token`. */
  const serviceAccount = (name: string, token: string, caPem = ca.caPem) => {
    const dir = join(tmp.path, name);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'token'), token);
    writeFileSync(join(dir, 'ca.crt'), caPem);
    return dir;
  };
  const env = (s: KubeApiServer) => {
    const u = new URL(s.url);
    return { KUBERNETES_SERVICE_HOST: u.hostname.replace(/^\[|\]$/g, ''), KUBERNETES_SERVICE_PORT: u.port };
  };

  describe('in-cluster', () => {
    it('uses the service host, the service account\'s CA and token', async () => {
      const conn = await loadKubeConnection({ env: env(server), serviceAccountDir: serviceAccount('sa', 'sa-token-1\n') });
      expect(conn.server).toBe(server.url);
      expect(conn.description).toBe(`in-cluster (${server.url})`);
      const list = await client(conn).listNodes();
      expect(list.items.map((n) => n.metadata.name)).toEqual(['n1']);
      expect(list.resourceVersion).toMatch(/^\d+$/);
      expect((await server.requests()).at(-1)).toMatchObject({ path: '/api/v1/nodes', user: FLANNEL_USER, userAgent: 'vxlan-flannel' });
    });

    it('reads the token file again when the kubelet rotates it', async () => {
      const dir = serviceAccount('sa-rotate', 'sa-token-1');
      const c = client(await loadKubeConnection({ env: env(server), serviceAccountDir: dir }));
      await c.getNode('n1');
      writeFileSync(join(dir, 'token'), 'sa-token-2');
      await server.setUsers([{ name: FLANNEL_USER, token: 'sa-token-2', role: 'flannel' }, { name: 'admin', token: 'admin-token', role: 'admin' }]);
      try {
        expect((await c.getNode('n1')).metadata.name).toBe('n1');
      } finally {
        await server.setUsers([{ name: 'admin', token: 'admin-token', role: 'admin' }, { name: FLANNEL_USER, token: 'sa-token-1', role: 'flannel' }]);
      }
    });

    it('puts an IPv6 service host in brackets', async () => {
      const conn = await loadKubeConnection({ env: env(server6), serviceAccountDir: serviceAccount('sa6', 'sa-token-1') });
      expect(conn.server).toMatch(/^https:\/\/\[::1\]:\d+$/);
      expect((await client(conn).getNode('v6')).metadata.name).toBe('v6');
    });

    it.each([
      [{}, 'sa', /KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set/],
      [{ KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' }, 'missing', /cannot read the service account CA .*missing\/ca.crt: ENOENT/],
    ])('fails clearly with %j', async (vars, dir, msg) => {
      await expect(loadKubeConnection({ env: vars, serviceAccountDir: join(tmp.path, dir) })).rejects.toThrow(msg);
    });
  });

  describe('kubeconfig files and --kube-api-url', () => {
    it('reads the current context: a CA file relative to the kubeconfig, a token', async () => {
      mkdirSync(join(tmp.path, 'kc'), { recursive: true });
      writeFileSync(join(tmp.path, 'kc', 'ca.pem'), ca.caPem);
      const path = file('kc/config', kubeconfigYaml({ server: server.url, caFile: 'ca.pem', token: 'admin-token' }));
      const conn = await loadKubeConnection({ kubeconfigFile: path });
      expect(conn.description).toBe(`kubeconfig ${path} (context test)`);
      await client(conn).getNode('n1');
      expect((await server.requests()).at(-1)!.user).toBe('admin');
    });

    it('reads certificate-authority-data and a client certificate (files and data)', async () => {
      const user = ca.client('system:node:n1');
      const viaFiles = await loadKubeConnection({ kubeconfigFile: file('kc-cert', kubeconfigYaml({ server: server.url, caPem: ca.caPem, clientCertFile: user.cert, clientKeyFile: user.key })) });
      await client(viaFiles).getNode('n1');
      expect((await server.requests()).at(-1)!.user).toBe('system:node:n1');
      const viaData = await loadKubeConnection({ kubeconfigFile: file('kc-data', kubeconfigYaml({ server: server.url, caPem: ca.caPem, clientCertPem: user.certPem, clientKeyPem: user.keyPem })) });
      await client(viaData).getNode('n1');
      expect((await server.requests()).at(-1)!.user).toBe('system:node:n1');
    });

    it('reads a tokenFile again on each request, and --kube-api-url replaces the server', async () => {
      const tokenPath = file('token', 'admin-token');
      const conn = await loadKubeConnection({ kubeconfigFile: file('kc-tf', kubeconfigYaml({ server: 'https://192.0.2.1:6443', caPem: ca.caPem, tokenFile: tokenPath })), apiUrl: server.url });
      expect(conn.server).toBe(server.url);
      const c = client(conn);
      await c.getNode('n1');
      writeFileSync(tokenPath, 'sa-token-1');
      await c.getNode('n1');
      expect((await server.requests()).slice(-2).map((r) => r.user)).toEqual(['admin', FLANNEL_USER]);
    });

    it('honours insecure-skip-tls-verify, with a warning to log', async () => {
      const conn = await loadKubeConnection({ kubeconfigFile: file('kc-insecure', kubeconfigYaml({ server: server.url, insecureSkipTlsVerify: true, token: 'admin-token' })) });
      expect((await client(conn).getNode('n1')).metadata.name).toBe('n1');
      expect(verificationWarning(conn)).toMatch(/^WARNING: the Kubernetes API server's certificate is not verified \(insecure-skip-tls-verify in kubeconfig .*kc-insecure/);
      expect(verificationWarning({ ...conn, insecureSkipTLSVerify: undefined })).toBeUndefined();
      expect(verificationWarning({ server: 'http://10.0.0.1:8080', description: 'x' })).toMatch(/plain HTTP/);
    });

    it.each([
      ['certificate-authority-data', { caPem: true }],
      ['certificate-authority', { caFile: true }],
    ])('refuses insecure-skip-tls-verify with a CA (%s), as client-go does', async (_what, caSpec) => {
      const caFile = join(tmp.path, 'kc-ca.crt');
      writeFileSync(caFile, ca.caPem);
      const spec = 'caFile' in caSpec ? { caFile } : { caPem: ca.caPem };
      const text = kubeconfigYaml({ server: server.url, insecureSkipTlsVerify: true, token: 'admin-token', ...spec });
      const err = await rejected(KubeConfigError, loadKubeConnection({ kubeconfigFile: file('kc-insecure-ca', text) }));
      expect(err.message).toMatch(/kc-insecure-ca: cluster "stand-in": insecure-skip-tls-verify with a CA .*not allowed/);
    });

    it('with --kube-api-url alone: no credentials (the server says 401, and the error says so)', async () => {
      const conn = await loadKubeConnection({ apiUrl: server.url + '/' });
      expect(conn.server).toBe(server.url);
      const err = await rejected(KubeApiError, client({ ...conn, ca: Buffer.from(ca.caPem) }).listNodes());
      expect(err.status).toBe(401);
      expect(err.message).toBe(`GET ${server.url}/api/v1/nodes?limit=500: 401 Unauthorized: Unauthorized`);
    });

    it.each([
      ['no current context', 'apiVersion: v1\nkind: Config\nclusters: []\n', /kc-bad: no current-context/],
      ['not YAML', 'a: [1,\n', /kc-bad is not YAML/],
      ['a context naming no known cluster', 'current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n', /no cluster named "c"/],
      ['an exec plugin', kubeconfigYaml({ server: 'https://h:6443' }).replace('    {}', '    exec: {command: aws}'), /user "tester": exec is not supported/],
      ['a cert without its key', kubeconfigYaml({ server: 'https://h:6443', clientCertPem: 'x' }), /needs its key/],
      ['a server that is no URL', kubeconfigYaml({ server: 'h:6443' }), /cluster "stand-in" server: "h:6443" must be an http or https URL/],
    ])('refuses %s, naming the file', async (_what, text, msg) => {
      const err = await rejected(KubeConfigError, loadKubeConnection({ kubeconfigFile: file('kc-bad', text) }));
      expect(err.message).toMatch(msg);
    });

    it('refuses credentials in the server\'s URL, and never prints them', async () => {
      for (const url of ['https://:hunter2@127.0.0.1:6443/', 'https://admin:hunter2@127.0.0.1:6443', 'https://hunter2@127.0.0.1/', 'http://a:hunter2@bad host/']) {
        for (const load of [
          () => loadKubeConnection({ apiUrl: url }),
          () => loadKubeConnection({ kubeconfigFile: file('kc-creds', kubeconfigYaml({ server: url, token: 't' })) }),
        ]) {
          const err = await rejected(KubeConfigError, load());
          expect(err.message).toMatch(/must not carry a user or password/);
          expect(err.message, url).not.toContain('hunter2');
        }
      }
      const inCluster = await rejected(KubeConfigError, loadKubeConnection({ env: { KUBERNETES_SERVICE_HOST: 'x:hunter2@10.0.0.1', KUBERNETES_SERVICE_PORT: '443' }, serviceAccountDir: serviceAccount('sa-creds', 't') }));
      expect(inCluster.message).not.toContain('hunter2');
    });

    it('refuses a missing file and a bad --kube-api-url', async () => {
      await expect(loadKubeConnection({ kubeconfigFile: join(tmp.path, 'nope') })).rejects.toThrow(/cannot read kubeconfig .*nope: ENOENT/);
      await expect(loadKubeConnection({ apiUrl: 'ftp://x' })).rejects.toThrow(/--kube-api-url: "ftp:\/\/x" must be an http or https URL/);
    });
  });

  describe('TLS and errors', () => {
    it('refuses a server whose certificate the CA did not sign, naming the URL and the CA', async () => {
      const conn = await loadKubeConnection({ kubeconfigFile: file('kc-wrong-ca', kubeconfigYaml({ server: server.url, caFile: otherCA.caFile, token: 'admin-token' })) });
      const err = await rejected(KubeApiError, client(conn).getNode('n1'));
      expect(err.message).toMatch(new RegExp(`^GET ${server.url}/api/v1/nodes/n1: TLS: the server's certificate is not trusted \\((UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN)`));
      expect(err.message).toContain(`checked against the CA in ${otherCA.caFile}`);
    });

    it('names the URL and the status of an error answer', async () => {
      const c = client({ server: server.url, ca: Buffer.from(ca.caPem), token: () => 'admin-token', description: 'test' });
      const err = await rejected(KubeApiError, c.getNode('zz'));
      expect(err.message).toBe(`GET ${server.url}/api/v1/nodes/zz: 404 NotFound: nodes "zz" not found`);
      expect([err.status, err.reason]).toEqual([404, 'NotFound']);
    });

    it('names the URL when nothing listens, and when the server never answers', async () => {
      const closed = await freePort();
      const err = await rejected(KubeApiError, client({ server: `https://127.0.0.1:${closed}`, description: 'test' }).listNodes());
      expect(err.message).toBe(`GET https://127.0.0.1:${closed}/api/v1/nodes?limit=500: connect ECONNREFUSED 127.0.0.1:${closed}`);
      const silent = await silentServer();
      try {
        const slow = await rejected(KubeApiError, client({ server: `http://127.0.0.1:${silent.port}`, description: 'test' }, { timeoutMs: 300 }).getNode('n1'));
        expect(slow.message).toBe(`GET http://127.0.0.1:${silent.port}/api/v1/nodes/n1: no answer within 0.3 s`);
      } finally {
        silent.close();
      }
    });
  });

  describe('a watch, on its own connection', () => {
    /** Watches Nodes from now; the events as "TYPE name". */
    const watchFromNow = async (c: KubeClient) => {
      const events: string[] = [];
      const handle = c.watchNodes((await c.listNodes()).resourceVersion, (e) => events.push(`${e.type} ${e.object.metadata.name}`), 60);
      return { events, handle };
    };
    const lastWatch = async (s: KubeApiServer) => (await s.requests()).filter((r) => r.query.watch === '1').at(-1);

    it('over TLS: with a client certificate, with a token and tls-server-name, and to an IPv6 server', async () => {
      const user = ca.client('system:node:n1');
      const cases: [KubeApiServer, KubeConnection, string][] = [
        [server, { server: server.url, ca: Buffer.from(ca.caPem), cert: Buffer.from(user.certPem), key: Buffer.from(user.keyPem), description: 'cert' }, 'system:node:n1'],
        [server, { server: server.url, ca: Buffer.from(ca.caPem), tlsServerName: 'localhost', token: () => 'admin-token', description: 'sni' }, 'admin'],
        [server6, { server: server6.url, ca: Buffer.from(ca.caPem), token: () => 'admin-token', description: 'v6' }, 'admin'],
      ];
      for (const [i, [s, conn, who]] of cases.entries()) {
        const { events, handle } = await watchFromNow(client(conn, { userAgent: 'watch-test' }));
        await waitFor('the watch to open', async () => (await s.openWatches()) === 1);
        await s.createNode({ metadata: { name: `w${i}` } });
        await waitFor(`the event of w${i}`, () => events.length === 1);
        expect(events).toEqual([`ADDED w${i}`]);
        expect(await lastWatch(s)).toMatchObject({ method: 'GET', path: '/api/v1/nodes', user: who, accept: 'application/json', userAgent: 'watch-test', status: 200 });
        handle.stop();
        await handle.done; // resolves: stopped
        await waitFor('the watch to close', async () => (await s.openWatches()) === 0);
        await s.deleteNode(`w${i}`);
      }
    });

    it('refuses a server the CA did not sign, or whose certificate is not for tls-server-name, naming the URL', async () => {
      const wrongCA = client({ server: server.url, ca: Buffer.from(otherCA.caPem), caSource: otherCA.caFile, token: () => 'admin-token', description: 'test' });
      let err = await rejected(KubeApiError, wrongCA.watchNodes('1', () => {}, 60).done);
      expect(err.message).toMatch(new RegExp(`^GET ${server.url}/api/v1/nodes\\?watch=1&.*: TLS: the server's certificate is not trusted \\((UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN).*checked against the CA in ${otherCA.caFile}\\)$`));
      const wrongName = client({ server: server.url, ca: Buffer.from(ca.caPem), tlsServerName: 'other.example', token: () => 'admin-token', description: 'test' });
      err = await rejected(KubeApiError, wrongName.watchNodes('1', () => {}, 60).done);
      expect(err.message).toMatch(/: TLS: the server's certificate is not trusted \(ERR_TLS_CERT_ALTNAME_INVALID: .*other\.example/);
      expect(await server.openWatches()).toBe(0);
    });

    it('names the status and reason of a watch refused (RBAC), and never sends a token that is not one header line', async () => {
      const flannel = client({ server: server.url, ca: Buffer.from(ca.caPem), token: () => 'sa-token-1', description: 'test' });
      const err = await rejected(KubeApiError, flannel.watch(PODS, '1', () => {}, 60).done);
      expect([err.status, err.reason]).toEqual([403, 'Forbidden']);
      expect(err.message).toMatch(/^GET https:\/\/127\.0\.0\.1:\d+\/api\/v1\/pods\?watch=1.*: 403 Forbidden: pods is forbidden: User "system:serviceaccount:kube-flannel:flannel" cannot watch resource "pods"/);
      await server.clearRequests();
      const smuggler = client({ server: server.url, ca: Buffer.from(ca.caPem), token: () => 'admin-token\r\nX-Injected: 1', description: 'test' });
      const refused = await rejected(KubeApiError, smuggler.watchNodes('1', () => {}, 60).done);
      expect(refused.message).toBe(`GET ${server.url}/api/v1/nodes?watch=1&allowWatchBookmarks=true&resourceVersion=1&timeoutSeconds=60: the Authorization header would hold a character a header cannot carry`);
      expect(await server.requests()).toEqual([]);
    });
  });

  describe('the kube subnet manager\'s writes, as kube-flannel\'s service account', () => {
    const names = annotationNames();
    const attrs = { backendType: 'vxlan', publicIP: IP.parse('192.168.56.11'), vni: 1, vtepMAC: '6e:9a:1b:2c:3d:4e' };
    let c: KubeClient;
    beforeAll(async () => {
      c = client(await loadKubeConnection({ env: env(server), serviceAccountDir: serviceAccount('sa-writes', 'sa-token-1') }));
    });

    it('patches flannel\'s annotations through /status, keeping every other annotation', async () => {
      const node = await c.getNode('n1');
      const patch = ownNodePatch(node, attrs, names)!;
      const after = await c.patchNode('n1', patch, { status: true });
      expect(after.metadata.annotations).toEqual({
        'node.alpha.kubernetes.io/ttl': '0',
        'example.com/owner': 'ops',
        'flannel.alpha.coreos.com/backend-type': 'vxlan',
        'flannel.alpha.coreos.com/backend-data': '{"VNI":1,"VtepMAC":"6e:9a:1b:2c:3d:4e"}',
        'flannel.alpha.coreos.com/public-ip': '192.168.56.11',
        'flannel.alpha.coreos.com/kube-subnet-manager': 'true',
      });
      expect((await server.getNode('n1'))!.metadata.annotations).toEqual(after.metadata.annotations);
      expect((await server.requests()).at(-1)).toMatchObject({ method: 'PATCH', path: '/api/v1/nodes/n1/status', contentType: 'application/strategic-merge-patch+json', status: 200 });
      expect(ownNodePatch(after, attrs, names)).toBeUndefined();
    });

    it('is refused a patch of the Node itself (kube-flannel\'s role has only nodes/status), with the server\'s reason', async () => {
      const err = await rejected(KubeApiError, c.patchNode('n1', { metadata: { labels: { a: 'b' } } }));
      expect([err.status, err.reason]).toEqual([403, 'Forbidden']);
      expect(err.message).toMatch(/PATCH https:\/\/127\.0\.0\.1:\d+\/api\/v1\/nodes\/n1: 403 Forbidden: nodes "n1" is forbidden: User "system:serviceaccount:kube-flannel:flannel" cannot patch resource "nodes"/);
    });

    it('sets NetworkUnavailable False, merged by type: the kubelet\'s Ready condition stays', async () => {
      const after = await c.patchNode('n1', networkUpPatch(new Date('2025-01-02T03:04:05Z')), { status: true });
      expect(after.status!.conditions).toEqual([
        { type: 'Ready', status: 'True', reason: 'KubeletReady' },
        { type: 'NetworkUnavailable', status: 'False', lastHeartbeatTime: '2025-01-02T03:04:05Z', lastTransitionTime: '2025-01-02T03:04:05Z', reason: 'FlannelIsUp', message: 'Flannel is running on this node' },
      ]);
      expect((await server.getNode('n1'))!.status.conditions).toEqual(after.status!.conditions);
    });
  });
});

/** A TCP server that accepts and never answers. */
async function silentServer(): Promise<{ port: number; close: () => void }> {
  const sockets: Socket[] = [];
  const s: Server = createServer((sock) => sockets.push(sock));
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return {
    port: (s.address() as { port: number }).port,
    close: () => {
      for (const sock of sockets) sock.destroy();
      s.close();
    },
  };
}
