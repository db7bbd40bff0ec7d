// No kube-apiserver can be installed here, so the kube subnet manager is
// tested against the stand-in (test/support/kube-apiserver.ts). This file
// proves the stand-in with the real kubectl: get, get -o json, annotate,
// patch (strategic, merge, JSON), delete, get --chunk-size (paged lists), and get --watch seeing changes made
// by another client, each checked against the server's own state; for Namespaces, Pods and NetworkPolicies
// (what --network-policy reads) apply -f (create, then a strategic merge patch), get across namespaces and by
// label, label --overwrite, get --watch, delete (a namespace with what is in it).
//
// The server runs as its own process inside a network namespace, over HTTPS
// with a CA made for the test and a bearer token, and kubectl runs in a
// second namespace joined to it by a veth pair: the way the 3-node overlay
// test's nodes will reach it. KUBECTL=path picks another kubectl (Debian's
// kubernetes-client 1.20 and a 1.32 from the Cloud SDK both pass).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeNetns, runProcess, sh, tempDir } from './helpers';
import { TestCA } from '../support/pki';
import { kubeconfigYaml } from '../support/kubeconfig';
import { KubeApiServerProcess, spawnKubeApiServer } from '../support/kube-apiserver-process';
import { waitFor } from '../support/wait';

const KUBECTL = process.env.KUBECTL ?? 'kubectl';
const API_IP = '10.251.77.1';
const CLIENT_IP = '10.251.77.2';
const TOKEN = 'kubectl-test-token-3f9a';

describe('the stand-in API server, driven by the real kubectl', () => {
  const tmp = tempDir('kube-kubectl');
  const apiNs = makeNetns('ktapi-srv');
  const clientNs = makeNetns('ktapi-cli');
  let server: KubeApiServerProcess;
  let kubeconfig: string;
  let ca: TestCA;
  const watchers: ChildProcess[] = [];

  /** kubectl in the client namespace, with the test's kubeconfig and its own cache dir. */
  const kubectl = async (...args: string[]) => {
    const r = await runProcess(
      ['nsenter', `--net=${clientNs.path}`, '--', KUBECTL, `--kubeconfig=${kubeconfig}`, `--cache-dir=${join(tmp.path, 'cache')}`, '--request-timeout=10s', ...args],
      { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: tmp.path },
      '',
    );
    return r;
  };
  const ok = async (...args: string[]) => {
    const r = await kubectl(...args);
    if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')} failed (${r.code}): ${r.stderr}`);
    return r.stdout;
  };

  beforeAll(async () => {
    sh(['ip', '-n', apiNs.name, 'link', 'add', 'ktapi0', 'type', 'veth', 'peer', 'name', 'ktapi1', 'netns', clientNs.name]);
    sh(['ip', '-n', apiNs.name, 'addr', 'add', `${API_IP}/30`, 'dev', 'ktapi0']);
    sh(['ip', '-n', clientNs.name, 'addr', 'add', `${CLIENT_IP}/30`, 'dev', 'ktapi1']);
    sh(['ip', '-n', apiNs.name, 'link', 'set', 'ktapi0', 'up']);
    sh(['ip', '-n', clientNs.name, 'link', 'set', 'ktapi1', 'up']);
    ca = new TestCA(join(tmp.path, 'pki'));
    const cert = ca.server('kube-apiserver', [API_IP], ['kubernetes.default.svc']);
    server = await spawnKubeApiServer({
      netns: apiNs.path,
      host: API_IP,
      port: 6443,
      tls: { cert: cert.certPem, key: cert.keyPem },
      users: [{ name: 'kubernetes-admin', token: TOKEN, role: 'admin' }],
    });
    kubeconfig = join(tmp.path, 'kubeconfig');
    writeFileSync(kubeconfig, kubeconfigYaml({ server: server.url, caFile: ca.caFile, token: TOKEN }), { mode: 0o600 });
    for (const name of ['kt-a', 'kt-b']) {
      await server.createNode({
        metadata: { name, labels: { 'kubernetes.io/hostname': name }, annotations: { 'node.alpha.kubernetes.io/ttl': '0' } },
        spec: { podCIDR: name === 'kt-a' ? '10.244.1.0/24' : '10.244.2.0/24' },
        status: { conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady' }], nodeInfo: { kubeletVersion: 'v1.32.1' } },
      });
    }
  });

  afterAll(async () => {
    for (const w of watchers) w.kill('SIGKILL');
    await server?.stop();
    apiNs.remove();
    clientNs.remove();
    tmp.remove();
  });

  it('is reached from another namespace over HTTPS with the test CA, and refuses a wrong token', async () => {
    expect(server.url).toBe(`https://${API_IP}:6443`);
    const badConfig = join(tmp.path, 'bad-kubeconfig');
    writeFileSync(badConfig, kubeconfigYaml({ server: server.url, caPem: ca.caPem, token: 'wrong' }));
    const r = await runProcess(['nsenter', `--net=${clientNs.path}`, '--', KUBECTL, `--kubeconfig=${badConfig}`, `--cache-dir=${join(tmp.path, 'cache2')}`, 'get', 'nodes'], { PATH: process.env.PATH ?? '', HOME: tmp.path }, '');
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/Unauthorized|must be logged in|provide credentials/);
  });

  it('kubectl get nodes: the Nodes, with the server-side table columns', async () => {
    const out = await ok('get', 'nodes');
    const lines = out.trim().split('\n');
    expect(lines[0]).toMatch(/^NAME\s+STATUS\s+ROLES\s+AGE\s+VERSION$/);
    expect(lines.slice(1).map((l) => l.split(/\s+/).slice(0, 3))).toEqual([
      ['kt-a', 'Ready', '<none>'],
      ['kt-b', 'Ready', '<none>'],
    ]);
  });

  it('kubectl get nodes --chunk-size=1: the list in pages (limit, continue), the same rows and the same JSON', async () => {
    await server.clearRequests();
    const out = await ok('get', 'nodes', '--chunk-size=1', '--no-headers');
    expect(out.trim().split('\n').map((l) => l.split(/\s+/)[0])).toEqual(['kt-a', 'kt-b']);
    const json = JSON.parse(await ok('get', 'nodes', '--chunk-size=1', '-o', 'json'));
    expect(json.items.map((n: { metadata: { name: string } }) => n.metadata.name)).toEqual(['kt-a', 'kt-b']);
    const lists = (await server.requests()).filter((r) => r.method === 'GET' && r.path === '/api/v1/nodes' && !r.control);
    // per command: a first page with limit=1, then one with its continue token
    expect(lists.map((r) => [r.query.limit, r.query.continue ? 'continue' : 'first'])).toEqual([['1', 'first'], ['1', 'continue'], ['1', 'first'], ['1', 'continue']]);
    expect(lists.every((r) => r.status === 200)).toBe(true);
  });

  it('kubectl get node -o json: the server\'s object', async () => {
    const got = JSON.parse(await ok('get', 'node', 'kt-a', '-o', 'json'));
    const stored = await server.getNode('kt-a');
    expect(got.metadata.uid).toBe(stored!.metadata.uid);
    expect(got.metadata.resourceVersion).toBe(stored!.metadata.resourceVersion);
    expect(got.spec).toEqual(stored!.spec);
    expect(got.status).toEqual(stored!.status);
  });

  it('kubectl annotate node: adds, overwrites and removes one annotation, the others stay', async () => {
    await ok('annotate', 'node', 'kt-a', 'example.com/k=v1');
    expect((await server.getNode('kt-a'))!.metadata.annotations).toEqual({ 'node.alpha.kubernetes.io/ttl': '0', 'example.com/k': 'v1' });
    const refused = await kubectl('annotate', 'node', 'kt-a', 'example.com/k=v2');
    expect(refused.code).not.toBe(0); // kubectl refuses to overwrite without --overwrite
    await ok('annotate', 'node', 'kt-a', 'example.com/k=v2', '--overwrite');
    expect((await server.getNode('kt-a'))!.metadata.annotations!['example.com/k']).toBe('v2');
    await ok('annotate', 'node', 'kt-a', 'example.com/k-');
    expect((await server.getNode('kt-a'))!.metadata.annotations).toEqual({ 'node.alpha.kubernetes.io/ttl': '0' });
    const log = await server.requests();
    expect(log.some((r) => r.method === 'PATCH' && r.path === '/api/v1/nodes/kt-a' && r.contentType === 'application/merge-patch+json' && r.user === 'kubernetes-admin')).toBe(true);
  });

  it('kubectl patch node: strategic (the default), merge and JSON patches', async () => {
    const before = (await server.getNode('kt-b'))!;
    await ok('patch', 'node', 'kt-b', '-p', '{"metadata":{"labels":{"role":"edge"}},"spec":{"podCIDRs":["10.244.2.0/24","fd00:10:244:2::/64"]}}');
    let now = (await server.getNode('kt-b'))!;
    expect(now.metadata.labels).toEqual({ 'kubernetes.io/hostname': 'kt-b', role: 'edge' });
    expect(now.spec.podCIDRs).toEqual(['10.244.2.0/24', 'fd00:10:244:2::/64']);
    expect(Number(now.metadata.resourceVersion)).toBeGreaterThan(Number(before.metadata.resourceVersion));
    await ok('patch', 'node', 'kt-b', '--type', 'merge', '-p', '{"metadata":{"labels":{"role":null}},"spec":{"unschedulable":true}}');
    now = (await server.getNode('kt-b'))!;
    expect(now.metadata.labels).toEqual({ 'kubernetes.io/hostname': 'kt-b' });
    expect(now.spec.unschedulable).toBe(true);
    expect(await ok('get', 'node', 'kt-b', '--no-headers')).toMatch(/^kt-b\s+Ready,SchedulingDisabled\s/);
    await ok('patch', 'node', 'kt-b', '--type', 'json', '-p', '[{"op":"remove","path":"/spec/unschedulable"}]');
    expect((await server.getNode('kt-b'))!.spec).not.toHaveProperty('unschedulable');
    const types = (await server.requests()).filter((r) => r.method === 'PATCH' && r.path === '/api/v1/nodes/kt-b').map((r) => r.contentType);
    expect(types).toEqual(['application/strategic-merge-patch+json', 'application/merge-patch+json', 'application/json-patch+json']);
  });

  it('kubectl reads the status subresource that another client patched (conditions merged by type)', async () => {
    // the status patch itself goes through the hooks: kubectl learned --subresource only in 1.24
    await server.patchNode('kt-a', { status: { conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady' }, { type: 'NetworkUnavailable', status: 'False', reason: 'FlannelIsUp' }] } });
    const status = JSON.parse(await ok('get', '--raw', '/api/v1/nodes/kt-a/status'));
    expect(status.status.conditions.map((c: { type: string; status: string }) => `${c.type}=${c.status}`)).toEqual(['Ready=True', 'NetworkUnavailable=False']);
  });

  it('kubectl get nodes --watch sees an ADD, a MODIFY and a DELETE made by another client', async () => {
    const child = spawn('nsenter', [`--net=${clientNs.path}`, '--', KUBECTL, `--kubeconfig=${kubeconfig}`, `--cache-dir=${join(tmp.path, 'cache')}`, 'get', 'nodes', '--watch', '--output-watch-events'], {
      env: { PATH: process.env.PATH ?? '', HOME: tmp.path },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    watchers.push(child);
    let out = '';
    let err = '';
    child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr!.on('data', (b: Buffer) => (err += b.toString()));
    const rows = () => out.trim().split('\n').slice(1).map((l) => l.split(/\s+/).slice(0, 2).join(' '));
    const waitRows = (n: number) => waitFor(`${n} rows from kubectl --watch (so far ${JSON.stringify(out)}, stderr ${JSON.stringify(err)})`, () => rows().length >= n, 30_000, 50);
    await waitRows(2);
    expect(rows()).toEqual(['ADDED kt-a', 'ADDED kt-b']);
    const watchOpen = async () => (await server.requests()).some((r) => r.query.watch === 'true' && r.status === 200);
    await waitFor('kubectl to open its watch', watchOpen, 30_000, 50);
    await server.createNode({ metadata: { name: 'kt-c' }, spec: { podCIDR: '10.244.3.0/24' } });
    await server.patchNode('kt-c', { metadata: { annotations: { 'flannel.alpha.coreos.com/backend-type': 'vxlan' } } });
    await server.deleteNode('kt-c');
    await waitRows(5);
    expect(rows().slice(2)).toEqual(['ADDED kt-c', 'MODIFIED kt-c', 'DELETED kt-c']);
    child.kill('SIGTERM');
  });

  describe('namespaces, pods and network policies', () => {
    const policyYaml = (port: number) => `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: db-from-web
  namespace: kt-x
spec:
  podSelector:
    matchLabels: {app: db}
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {team: blue}}
      podSelector: {matchLabels: {app: web}}
    ports:
    - port: ${port}
    - protocol: UDP
      port: dns
`;
    const apply = async (yaml: string) => {
      const file = join(tmp.path, 'apply.yaml');
      writeFileSync(file, yaml);
      return ok('apply', '-f', file);
    };

    it('kubectl apply -f: a Namespace and a NetworkPolicy from YAML; the server holds the policy as written; kubectl get networkpolicies shows it', async () => {
      expect(await apply('apiVersion: v1\nkind: Namespace\nmetadata: {name: kt-x, labels: {team: blue}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: kt-y}\n')).toMatch(/namespace\/kt-x created\s+namespace\/kt-y created/);
      expect((await server.get('namespaces', 'kt-x'))!.metadata.labels).toEqual({ team: 'blue', 'kubernetes.io/metadata.name': 'kt-x' });
      expect(await apply(policyYaml(5432))).toMatch(/networkpolicy\.networking\.k8s\.io\/db-from-web created/);
      const stored = (await server.get('networkpolicies', 'kt-x/db-from-web'))!;
      expect(stored.spec).toEqual({
        podSelector: { matchLabels: { app: 'db' } },
        ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: 'blue' } }, podSelector: { matchLabels: { app: 'web' } } }], ports: [{ port: 5432 }, { protocol: 'UDP', port: 'dns' }] }],
      });
      expect(stored.spec.policyTypes).toBeUndefined(); // no defaulting: the daemon's own is what its tests see
      const rows = (await ok('get', 'networkpolicies', '-n', 'kt-x')).trim().split('\n');
      expect(rows[0]).toMatch(/^NAME\s+POD-SELECTOR\s+AGE$/);
      expect(rows[1].split(/\s+/).slice(0, 2)).toEqual(['db-from-web', 'app=db']);
      expect(JSON.parse(await ok('get', 'netpol', '-A', '-o', 'json')).items.map((p: { metadata: { name: string } }) => p.metadata.name)).toEqual(['db-from-web']);
    });

    it('kubectl apply -f of a changed policy: one strategic merge patch, the new spec stored; applied again: unchanged, no write', async () => {
      await server.clearRequests();
      expect(await apply(policyYaml(5433))).toMatch(/db-from-web configured/);
      expect((await server.get('networkpolicies', 'kt-x/db-from-web'))!.spec.ingress[0].ports).toEqual([{ port: 5433 }, { protocol: 'UDP', port: 'dns' }]);
      expect(await apply(policyYaml(5433))).toMatch(/db-from-web unchanged/);
      const writes = (await server.requests()).filter((r) => !r.control && r.method !== 'GET');
      expect(writes.map((r) => [r.method, r.path, r.contentType, r.status])).toEqual([
        ['PATCH', '/apis/networking.k8s.io/v1/namespaces/kt-x/networkpolicies/db-from-web', 'application/strategic-merge-patch+json', 200],
      ]);
    });

    it('pods: kubectl get pods -A --chunk-size=1 pages across namespaces; -l selects by label; kubectl label --overwrite moves a pod in and out of a selector', async () => {
      for (const [ns, name, app] of [['kt-x', 'db-0', 'db'], ['kt-x', 'web-0', 'web'], ['kt-y', 'web-1', 'web']]) {
        await server.create('pods', { metadata: { namespace: ns, name, labels: { app } }, spec: { nodeName: 'kt-a', containers: [{ name: 'c', image: 'i', ports: [{ name: 'dns', containerPort: 53, protocol: 'UDP' }] }] }, status: { phase: 'Running', podIP: '10.244.1.5', podIPs: [{ ip: '10.244.1.5' }] } });
      }
      await server.clearRequests();
      const all = (await ok('get', 'pods', '-A', '--chunk-size=1', '--no-headers')).trim().split('\n').map((l) => l.split(/\s+/).slice(0, 2).join('/'));
      expect(all).toEqual(['kt-x/db-0', 'kt-x/web-0', 'kt-y/web-1']);
      const pages = (await server.requests()).filter((r) => !r.control && r.path === '/api/v1/pods');
      expect(pages.length).toBe(3);
      const web = async () => (await ok('get', 'pods', '-A', '-l', 'app=web', '-o', 'jsonpath={.items[*].metadata.name}')).trim();
      expect(await web()).toBe('web-0 web-1');
      await ok('label', 'pod', '-n', 'kt-y', 'web-1', 'app=db', '--overwrite');
      expect(await web()).toBe('web-0');
      expect((await server.get('pods', 'kt-y/web-1'))!.metadata.labels).toEqual({ app: 'db' });
      await ok('label', 'pod', '-n', 'kt-y', 'web-1', 'app=web', '--overwrite');
      expect(await web()).toBe('web-0 web-1');
      expect((await ok('get', 'pod', '-n', 'kt-x', 'db-0', '--no-headers')).split(/\s+/).slice(0, 3)).toEqual(['db-0', '0/1', 'Running']);
    });

    it('kubectl get networkpolicies --watch sees an ADD, a MODIFY and a DELETE made by another client', async () => {
      const child = spawn('nsenter', [`--net=${clientNs.path}`, '--', KUBECTL, `--kubeconfig=${kubeconfig}`, `--cache-dir=${join(tmp.path, 'cache')}`, 'get', 'networkpolicies', '-n', 'kt-y', '--watch', '--output-watch-events'], {
        env: { PATH: process.env.PATH ?? '', HOME: tmp.path },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      watchers.push(child);
      let out = '';
      child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
      const rows = () => out.trim().split('\n').filter((l) => /^(ADDED|MODIFIED|DELETED)/.test(l)).map((l) => l.split(/\s+/).slice(0, 3).join(' '));
      await waitFor('kubectl to open its watch', async () => (await server.requests()).some((r) => r.path === '/apis/networking.k8s.io/v1/namespaces/kt-y/networkpolicies' && r.query.watch === 'true' && r.status === 200), 30_000, 50);
      await server.create('networkpolicies', { metadata: { namespace: 'kt-y', name: 'deny-all' }, spec: { podSelector: {} } });
      await server.patch('networkpolicies', 'kt-y/deny-all', { spec: { podSelector: { matchLabels: { app: 'web' } } } });
      await server.delete('networkpolicies', 'kt-y/deny-all');
      await waitFor(`three events from kubectl --watch (so far ${JSON.stringify(out)})`, () => rows().length >= 3, 30_000, 50);
      expect(rows()).toEqual(['ADDED deny-all <none>', 'MODIFIED deny-all app=web', 'DELETED deny-all app=web']);
      child.kill('SIGTERM');
    });

    it('kubectl delete networkpolicy, then kubectl delete namespace: its pods go with it', async () => {
      expect(await ok('delete', 'networkpolicy', '-n', 'kt-x', 'db-from-web')).toMatch(/networkpolicy\.networking\.k8s\.io "db-from-web" deleted/);
      expect(await server.get('networkpolicies', 'kt-x/db-from-web')).toBeUndefined();
      expect(await ok('delete', 'namespace', 'kt-x')).toMatch(/namespace "kt-x" deleted/);
      expect((await server.list('pods')).map((p) => `${p.metadata.namespace}/${p.metadata.name}`)).toEqual(['kt-y/web-1']);
      expect((await kubectl('get', 'pods', '-n', 'kt-x')).stderr + (await ok('get', 'pods', '-n', 'kt-x'))).toMatch(/No resources found/);
    });
  });

  it('kubectl delete node: the Node is gone from the server', async () => {
    expect(await ok('delete', 'node', 'kt-b')).toMatch(/node "kt-b" deleted/);
    expect(await server.getNode('kt-b')).toBeUndefined();
    expect((await server.listNodes()).map((n) => n.metadata.name)).toEqual(['kt-a']);
    const gone = await kubectl('get', 'node', 'kt-b');
    expect(gone.code).not.toBe(0);
    expect(gone.stderr).toMatch(/NotFound|not found/);
  });
});
