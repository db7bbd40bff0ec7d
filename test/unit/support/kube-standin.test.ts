// The stand-in API server's semantics, checked with raw HTTP (not with our
// client, which is tested against it; kubectl proves it in the integration
// tests): storage and resourceVersions, the node strategies, the three patch
// formats, watch replay / 410 / selectors / bookmarks / timeouts, auth.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import { KubeApiServer, startKubeApiServer } from '../../support/kube-apiserver';
import { PatchError, jsonPatch, mergePatch, strategicMergePatch } from '../../support/kube-patch';
import { waitFor } from '../../support/wait';

interface Answer {
  status: number;
  body: any;
}

function call(base: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const text = body === undefined ? undefined : JSON.stringify(body);
  const length: Record<string, string> = text === undefined ? {} : { 'content-length': String(Buffer.byteLength(text)) };
  return new Promise((resolve, reject) => {
    const req = http.request(base + path, { method, headers: { accept: 'application/json', ...length, ...headers } }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : undefined }));
    });
    req.on('error', reject);
    req.end(text);
  });
}

/** Opens a watch (of `path`: the Nodes by default); `events` fills as lines arrive; `ended` resolves when the server ends the stream. */
function watch(base: string, query: string, path = '/api/v1/nodes', headers: Record<string, string> = {}) {
  const events: any[] = [];
  let res!: http.IncomingMessage;
  const ended = new Promise<'end' | 'broken'>((resolve) => {
    http.get(`${base}${path}?watch=1&${query}`, { headers }, (r) => {
      res = r;
      let buf = '';
      r.on('data', (c) => {
        buf += c;
        for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
          events.push(JSON.parse(buf.slice(0, nl)));
          buf = buf.slice(nl + 1);
        }
      });
      r.on('end', () => resolve('end'));
      r.on('close', () => resolve(r.complete ? 'end' : 'broken'));
    }).on('error', () => resolve('broken'));
  });
  return { events, ended, close: () => res?.destroy() };
}


const node = (name: string, extra: object = {}) => ({ metadata: { name, labels: { role: 'worker' } }, spec: { podCIDR: '10.244.1.0/24' }, ...extra });
const strategic = { 'content-type': 'application/strategic-merge-patch+json' };
const merge = { 'content-type': 'application/merge-patch+json' };

describe('stand-in API server: storage and strategies', () => {
  let s: KubeApiServer;
  beforeAll(async () => {
    s = await startKubeApiServer({ historyLimit: 5 });
  });
  afterAll(() => s.stop());

  it('creates, gets, lists; a second create is 409 AlreadyExists; a missing node is a 404 Status', async () => {
    const created = await call(s.url, 'POST', '/api/v1/nodes', node('a'));
    expect(created.status).toBe(201);
    expect(created.body.metadata).toMatchObject({ name: 'a', uid: expect.any(String), resourceVersion: expect.stringMatching(/^\d+$/) });
    expect((await call(s.url, 'POST', '/api/v1/nodes', node('a'))).body).toMatchObject({ kind: 'Status', code: 409, reason: 'AlreadyExists' });
    expect((await call(s.url, 'GET', '/api/v1/nodes/a')).body.metadata.uid).toBe(created.body.metadata.uid);
    const missing = await call(s.url, 'GET', '/api/v1/nodes/zz');
    expect(missing).toEqual({ status: 404, body: { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: 'nodes "zz" not found', reason: 'NotFound', details: { name: 'zz', kind: 'nodes' }, code: 404 } });
    const list = await call(s.url, 'GET', '/api/v1/nodes');
    expect(list.body.kind).toBe('NodeList');
    expect(list.body.metadata.resourceVersion).toBe(created.body.metadata.resourceVersion);
  });

  it('bumps the resourceVersion on each write and not on a patch that changes nothing', async () => {
    const before = (await call(s.url, 'GET', '/api/v1/nodes/a')).body.metadata.resourceVersion;
    const same = await call(s.url, 'PATCH', '/api/v1/nodes/a', { metadata: { labels: { role: 'worker' } } }, strategic);
    expect(same.body.metadata.resourceVersion).toBe(before);
    const changed = await call(s.url, 'PATCH', '/api/v1/nodes/a', { metadata: { labels: { x: '1' } } }, strategic);
    expect(Number(changed.body.metadata.resourceVersion)).toBe(Number(before) + 1);
  });

  it('takes a given metadata.resourceVersion as a precondition (409 Conflict when stale)', async () => {
    const cur = (await call(s.url, 'GET', '/api/v1/nodes/a')).body;
    const stale = await call(s.url, 'PATCH', '/api/v1/nodes/a', { metadata: { resourceVersion: '1', labels: { y: '1' } } }, merge);
    expect(stale.body).toMatchObject({ code: 409, reason: 'Conflict' });
    const put = await call(s.url, 'PUT', '/api/v1/nodes/a', { ...cur, metadata: { ...cur.metadata, labels: { z: '1' } } });
    expect(put.body.metadata.labels).toEqual({ z: '1' });
    expect((await call(s.url, 'PUT', '/api/v1/nodes/a', cur)).body.reason).toBe('Conflict');
  });

  it('keeps the status on a Node write and the spec on a /status write; metadata changes through both', async () => {
    await s.patchNode('a', { status: { conditions: [{ type: 'Ready', status: 'True' }] } });
    const viaNode = await call(s.url, 'PATCH', '/api/v1/nodes/a', { status: { conditions: null }, spec: { unschedulable: true } }, merge);
    expect(viaNode.body.status.conditions).toEqual([{ type: 'Ready', status: 'True' }]);
    expect(viaNode.body.spec.unschedulable).toBe(true);
    const viaStatus = await call(s.url, 'PATCH', '/api/v1/nodes/a/status', { metadata: { annotations: { k: 'v' } }, spec: { unschedulable: false }, status: { conditions: [{ type: 'NetworkUnavailable', status: 'False' }] } }, strategic);
    expect(viaStatus.body.spec.unschedulable).toBe(true);
    expect(viaStatus.body.metadata.annotations).toEqual({ k: 'v' });
    expect(viaStatus.body.status.conditions).toEqual([{ type: 'Ready', status: 'True' }, { type: 'NetworkUnavailable', status: 'False' }]);
    expect((await call(s.url, 'GET', '/api/v1/nodes/a/status')).body.metadata.name).toBe('a');
  });

  it('applies JSON patches, refuses an unknown patch type (415), a renaming patch (400) and a failed test (422)', async () => {
    const ok = await call(s.url, 'PATCH', '/api/v1/nodes/a', [{ op: 'add', path: '/metadata/labels/j', value: 'p' }], { 'content-type': 'application/json-patch+json' });
    expect(ok.body.metadata.labels.j).toBe('p');
    expect((await call(s.url, 'PATCH', '/api/v1/nodes/a', {}, { 'content-type': 'application/apply-patch+yaml' })).status).toBe(415);
    expect((await call(s.url, 'PATCH', '/api/v1/nodes/a', { metadata: { name: 'b' } }, merge)).status).toBe(400);
    expect((await call(s.url, 'PATCH', '/api/v1/nodes/a', [{ op: 'test', path: '/metadata/name', value: 'b' }], { 'content-type': 'application/json-patch+json' })).status).toBe(422);
  });

  it('lists by label and field selector; refuses an unsupported field', async () => {
    await call(s.url, 'POST', '/api/v1/nodes', { metadata: { name: 'b', labels: { role: 'edge' } } });
    const names = async (q: string) => (await call(s.url, 'GET', `/api/v1/nodes?${q}`)).body.items.map((n: any) => n.metadata.name);
    expect(await names('labelSelector=role%3Dedge')).toEqual(['b']);
    expect(await names('labelSelector=role%20in%20(edge%2Cworker)')).toEqual(['b']);
    expect(await names('labelSelector=!role')).toEqual(['a']);
    expect(await names('fieldSelector=metadata.name%3Da')).toEqual(['a']);
    expect(await names('fieldSelector=metadata.name!%3Da')).toEqual(['b']);
    expect((await call(s.url, 'GET', '/api/v1/nodes?fieldSelector=spec.podCIDR%3Dx')).status).toBe(400);
  });

  it('deletes with preconditions and answers a Success Status', async () => {
    const b = (await call(s.url, 'GET', '/api/v1/nodes/b')).body;
    const refused = await call(s.url, 'DELETE', '/api/v1/nodes/b', { preconditions: { uid: 'other' } });
    expect(refused.body).toMatchObject({ code: 409, reason: 'Conflict' });
    const del = await call(s.url, 'DELETE', '/api/v1/nodes/b', { preconditions: { uid: b.metadata.uid } });
    expect(del.body).toMatchObject({ kind: 'Status', status: 'Success', details: { name: 'b', kind: 'nodes', uid: b.metadata.uid } });
    expect(await s.getNode('b')).toBeUndefined();
  });
});

describe('stand-in API server: watch', () => {
  let s: KubeApiServer;
  beforeAll(async () => {
    s = await startKubeApiServer({ historyLimit: 4, bookmarkIntervalMs: 100 });
  });
  afterAll(() => s.stop());

  it('from "0" sends an ADDED per Node, then live changes', async () => {
    await s.createNode(node('w1'));
    const w = watch(s.url, 'resourceVersion=0');
    await waitFor('the initial ADDED', () => w.events.length === 1);
    await s.patchNode('w1', { metadata: { annotations: { a: '1' } } });
    await s.deleteNode('w1');
    await waitFor('MODIFIED and DELETED', () => w.events.length === 3);
    expect(w.events.map((e) => e.type)).toEqual(['ADDED', 'MODIFIED', 'DELETED']);
    expect(w.events[2].object.metadata.annotations).toEqual({ a: '1' });
    expect(Number(w.events[2].object.metadata.resourceVersion)).toBe(Number(w.events[1].object.metadata.resourceVersion) + 1);
    w.close();
  });

  it('from N replays the changes after N; from before the history it is an ERROR event with a 410 Expired Status', async () => {
    const from = (await call(s.url, 'GET', '/api/v1/nodes')).body.metadata.resourceVersion;
    await s.createNode(node('w2'));
    await s.patchNode('w2', { metadata: { labels: { a: '1' } } });
    const w = watch(s.url, `resourceVersion=${from}`);
    await waitFor('the replay', () => w.events.length === 2);
    expect(w.events.map((e) => e.type)).toEqual(['ADDED', 'MODIFIED']);
    w.close();
    for (let i = 0; i < 5; i++) await s.patchNode('w2', { metadata: { labels: { a: String(i + 2) } } });
    const old = watch(s.url, `resourceVersion=${from}`);
    expect(await old.ended).toBe('end');
    expect(old.events).toEqual([{ type: 'ERROR', object: expect.objectContaining({ kind: 'Status', code: 410, reason: 'Expired', message: expect.stringMatching(/^too old resource version: \d+ \(\d+\)$/) }) }]);
  });

  it('forceGone() answers the next watch from a resourceVersion with 410, once', async () => {
    const rv = (await call(s.url, 'GET', '/api/v1/nodes')).body.metadata.resourceVersion;
    await s.forceGone();
    const first = watch(s.url, `resourceVersion=${rv}`);
    await first.ended;
    expect(first.events[0].object.code).toBe(410);
    const second = watch(s.url, `resourceVersion=${rv}&timeoutSeconds=1`);
    expect(await second.ended).toBe('end');
    expect(second.events).toEqual([]);
  });

  it('forceGone(0, addresses): each listed client\'s own next watch gets 410; other clients are not affected', async () => {
    const rv = (await call(s.url, 'GET', '/api/v1/nodes')).body.metadata.resourceVersion;
    await s.forceGone(0, ['192.0.2.9']); // not us
    const ours = watch(s.url, `resourceVersion=${rv}&timeoutSeconds=1`);
    expect(await ours.ended).toBe('end');
    expect(ours.events).toEqual([]);
    await s.forceGone(0, ['127.0.0.1']);
    const gone = watch(s.url, `resourceVersion=${rv}`);
    await gone.ended;
    expect(gone.events[0].object.code).toBe(410);
    const again = watch(s.url, `resourceVersion=${rv}&timeoutSeconds=1`);
    expect(await again.ended).toBe('end');
    expect(again.events).toEqual([]);
  });

  it('sends DELETED when a Node stops matching the selector and ADDED when it starts', async () => {
    const w = watch(s.url, 'resourceVersion=0&labelSelector=role%3Dworker');
    await waitFor('the initial ADDED', () => w.events.length === 1);
    await s.patchNode('w2', { metadata: { labels: { role: 'edge' } } });
    await s.patchNode('w2', { metadata: { labels: { role: 'worker' } } });
    await waitFor('two events', () => w.events.length === 3);
    expect(w.events.map((e) => e.type)).toEqual(['ADDED', 'DELETED', 'ADDED']);
    w.close();
  });

  it('sends bookmarks (only when allowed) carrying the current resourceVersion, also after writes elsewhere', async () => {
    const rv = await s.bumpResourceVersion(3);
    const w = watch(s.url, 'resourceVersion=0&allowWatchBookmarks=true&fieldSelector=metadata.name%3Dnone');
    const plain = watch(s.url, 'resourceVersion=0&fieldSelector=metadata.name%3Dnone');
    await waitFor('a bookmark', () => w.events.length > 0);
    expect(w.events[0]).toMatchObject({ type: 'BOOKMARK', object: { kind: 'Node', metadata: { resourceVersion: rv } } });
    expect(plain.events).toEqual([]);
    w.close();
    plain.close();
  });

  it('ends the stream after timeoutSeconds, and dropWatches() breaks it', async () => {
    const t0 = Date.now();
    expect(await watch(s.url, 'resourceVersion=0&timeoutSeconds=1').ended).toBe('end');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(900);
    const w = watch(s.url, 'resourceVersion=0');
    await waitFor('the watch to open', () => w.events.length > 0);
    expect(await s.dropWatches()).toBe(1);
    expect(await w.ended).toBe('broken');
  });

  it('answers a Table to kubectl\'s Accept header, with its node columns', async () => {
    const t = await call(s.url, 'GET', '/api/v1/nodes', undefined, { accept: 'application/json;as=Table;v=v1;g=meta.k8s.io,application/json' });
    expect(t.body.kind).toBe('Table');
    expect(t.body.columnDefinitions.map((c: any) => c.name).slice(0, 5)).toEqual(['Name', 'Status', 'Roles', 'Age', 'Version']);
    expect(t.body.rows[0].cells[0]).toBe('w2');
    expect(t.body.rows[0].object.kind).toBe('PartialObjectMetadata');
  });
});

describe('stand-in API server: paged lists (limit, continue)', () => {
  let s: KubeApiServer;
  beforeAll(async () => {
    s = await startKubeApiServer({ historyLimit: 4 });
    // names whose byte order differs from a locale's: pages follow etcd's key order
    for (const name of ['n-b', 'n-a', 'n.c', 'n1', 'n-10']) await s.createNode(node(name));
  });
  afterAll(() => s.stop());
  const names = (body: any) => body.items.map((n: any) => n.metadata.name);
  const page = (query: string) => call(s.url, 'GET', `/api/v1/nodes?${query}`);

  it('serves limit-sized pages in key order, each with the first page\'s resourceVersion, until no continue token is left', async () => {
    const first = await page('limit=2');
    expect(names(first.body)).toEqual(['n-10', 'n-a']);
    expect(first.body.metadata).toMatchObject({ continue: expect.any(String), remainingItemCount: 3 });
    const rv = first.body.metadata.resourceVersion;
    // a change between pages: the later pages still show the list as it was at rv
    await s.patchNode('n.c', { metadata: { labels: { moved: 'yes' } } });
    await s.createNode(node('n-0'));
    await s.deleteNode('n1');
    const second = await page(`limit=2&continue=${encodeURIComponent(first.body.metadata.continue)}`);
    expect(names(second.body)).toEqual(['n-b', 'n.c']);
    expect(second.body.items[1].metadata.labels).toEqual({ role: 'worker' });
    expect(second.body.metadata.resourceVersion).toBe(rv);
    const third = await page(`limit=2&continue=${encodeURIComponent(second.body.metadata.continue)}`);
    expect(names(third.body)).toEqual(['n1']);
    expect(third.body.metadata).toEqual({ resourceVersion: rv });
    // a fresh list sees the changes
    expect(names((await page('limit=10')).body)).toEqual(['n-0', 'n-10', 'n-a', 'n-b', 'n.c']);
    await s.deleteNode('n-0');
    await s.createNode(node('n1'));
  });

  it('answers 410 Expired, with a token for the inconsistent rest, once the token\'s resourceVersion left the history', async () => {
    const first = await page('limit=1');
    for (let i = 0; i < 5; i++) await s.patchNode('n-a', { metadata: { labels: { i: String(i) } } }); // history of 4: compacted
    const stale = await page(`limit=1&continue=${encodeURIComponent(first.body.metadata.continue)}`);
    expect(stale.status).toBe(410);
    expect(stale.body).toMatchObject({ kind: 'Status', code: 410, reason: 'Expired', message: expect.stringMatching(/^The provided continue parameter is too old/), metadata: { continue: expect.any(String) } });
    const rest = await page(`limit=10&continue=${encodeURIComponent(stale.body.metadata.continue)}`);
    expect(names(rest.body)).toEqual(['n-a', 'n-b', 'n.c', 'n1']);
    expect(Number(rest.body.metadata.resourceVersion)).toBeGreaterThan(Number(first.body.metadata.resourceVersion));
  });

  it('expires the next continue token on request (expireContinueTokens), refuses a token with a resourceVersion or a bad token (400)', async () => {
    const first = await page('limit=2');
    await s.expireContinueTokens(1);
    const token = encodeURIComponent(first.body.metadata.continue);
    expect((await page(`limit=2&continue=${token}`)).status).toBe(410);
    expect(names((await page(`limit=2&continue=${token}`)).body)).toEqual(['n-b', 'n.c']);
    expect((await page(`limit=2&continue=${token}&resourceVersion=1`)).status).toBe(400);
    expect((await page('limit=2&continue=bm90LWEtdG9rZW4=')).body).toMatchObject({ code: 400, reason: 'BadRequest' });
  });

  it('pages the server-side Table too (kubectl get --chunk-size)', async () => {
    const t = await call(s.url, 'GET', '/api/v1/nodes?limit=3', undefined, { accept: 'application/json;as=Table;v=v1;g=meta.k8s.io' });
    expect(t.body.kind).toBe('Table');
    expect(t.body.rows.map((r: any) => r.cells[0])).toEqual(['n-10', 'n-a', 'n-b']);
    expect(t.body.metadata.continue).toEqual(expect.any(String));
  });
});

describe('stand-in API server: authentication and roles', () => {
  let s: KubeApiServer;
  beforeAll(async () => {
    s = await startKubeApiServer({ users: [{ name: 'admin', token: 'adm', role: 'admin' }, { name: 'system:serviceaccount:kube-flannel:flannel', token: 'fl', role: 'flannel' }] });
    await s.createNode(node('n1'));
  });
  afterAll(() => s.stop());

  it('answers 401 without a token or with a wrong one; /version is public', async () => {
    expect((await call(s.url, 'GET', '/api/v1/nodes')).body).toMatchObject({ code: 401, reason: 'Unauthorized' });
    expect((await call(s.url, 'GET', '/api/v1/nodes', undefined, { authorization: 'Bearer nope' })).status).toBe(401);
    expect((await call(s.url, 'GET', '/version')).status).toBe(200);
    expect((await call(s.url, 'GET', '/api/v1/nodes', undefined, { authorization: 'Bearer adm' })).status).toBe(200);
  });

  it('gives the flannel role what kube-flannel\'s ClusterRole gives: read nodes, patch nodes/status', async () => {
    const fl = { authorization: 'Bearer fl' };
    expect((await call(s.url, 'GET', '/api/v1/nodes/n1', undefined, fl)).status).toBe(200);
    expect((await call(s.url, 'PATCH', '/api/v1/nodes/n1/status', { metadata: { annotations: { a: 'b' } } }, { ...fl, ...strategic })).status).toBe(200);
    const denied = await call(s.url, 'PATCH', '/api/v1/nodes/n1', { metadata: { annotations: { a: 'c' } } }, { ...fl, ...strategic });
    expect(denied.body).toMatchObject({ code: 403, reason: 'Forbidden', message: 'nodes "n1" is forbidden: User "system:serviceaccount:kube-flannel:flannel" cannot patch resource "nodes" in API group "" at the cluster scope' });
    expect((await call(s.url, 'DELETE', '/api/v1/nodes/n1', undefined, fl)).status).toBe(403);
  });

  it('records who asked for what', async () => {
    const log = await s.requests();
    expect(log.some((r) => r.method === 'PATCH' && r.path === '/api/v1/nodes/n1/status' && r.user === 'system:serviceaccount:kube-flannel:flannel' && r.status === 200)).toBe(true);
  });
});

describe('the patch formats', () => {
  const n = { metadata: { name: 'a', annotations: { keep: '1', drop: '2' }, finalizers: ['f1'] }, spec: { podCIDRs: ['10.0.0.0/24'], taints: [{ key: 't1' }] }, status: { conditions: [{ type: 'Ready', status: 'True' }, { type: 'MemoryPressure', status: 'False' }] } };

  it('merge patch: maps merge, null deletes, lists are replaced', () => {
    expect(mergePatch(n, { metadata: { annotations: { drop: null, add: '3' } }, status: { conditions: [{ type: 'X', status: 'True' }] } })).toEqual({
      ...n,
      metadata: { ...n.metadata, annotations: { keep: '1', add: '3' } },
      status: { conditions: [{ type: 'X', status: 'True' }] },
    });
  });

  it('strategic merge patch: conditions merge by type, with $patch delete and $setElementOrder', () => {
    const out = strategicMergePatch(n, {
      status: { '$setElementOrder/conditions': [{ type: 'NetworkUnavailable' }, { type: 'Ready' }], conditions: [{ type: 'Ready', status: 'False' }, { type: 'NetworkUnavailable', status: 'False' }, { type: 'MemoryPressure', $patch: 'delete' }] },
    }) as any;
    expect(out.status.conditions).toEqual([{ type: 'NetworkUnavailable', status: 'False' }, { type: 'Ready', status: 'False' }]);
  });

  it('strategic merge patch: podCIDRs and finalizers merge as sets, other lists (taints) are replaced, $deleteFromPrimitiveList and $retainKeys work', () => {
    const out = strategicMergePatch(n, { metadata: { finalizers: ['f2'], '$deleteFromPrimitiveList/finalizers': ['f1'] }, spec: { podCIDRs: ['fd00::/64'], taints: [{ key: 't2' }] } }) as any;
    expect(out.metadata.finalizers).toEqual(['f2']);
    expect(out.spec).toEqual({ podCIDRs: ['10.0.0.0/24', 'fd00::/64'], taints: [{ key: 't2' }] });
    expect((strategicMergePatch(n, { spec: { $retainKeys: ['taints'], taints: [] } }) as any).spec).toEqual({ taints: [] });
    expect((strategicMergePatch(n, { status: { conditions: [{ $patch: 'replace' }, { type: 'Only', status: 'True' }] } }) as any).status.conditions).toEqual([{ type: 'Only', status: 'True' }]);
  });

  it('JSON patch: add, remove, replace, move, copy, test; pointers with ~0 ~1; errors', () => {
    const out = jsonPatch(n, [
      { op: 'add', path: '/metadata/annotations/a~1b', value: 'x' },
      { op: 'remove', path: '/metadata/annotations/drop' },
      { op: 'replace', path: '/status/conditions/0/status', value: 'False' },
      { op: 'add', path: '/spec/podCIDRs/-', value: 'fd00::/64' },
      { op: 'copy', from: '/metadata/annotations/keep', path: '/metadata/annotations/copied' },
      { op: 'move', from: '/metadata/annotations/copied', path: '/metadata/annotations/moved' },
      { op: 'test', path: '/metadata/annotations/moved', value: '1' },
    ]) as any;
    expect(out.metadata.annotations).toEqual({ keep: '1', 'a/b': 'x', moved: '1' });
    expect(out.status.conditions[0].status).toBe('False');
    expect(out.spec.podCIDRs).toEqual(['10.0.0.0/24', 'fd00::/64']);
    expect(n.metadata.annotations.drop).toBe('2'); // the input is untouched
    expect(() => jsonPatch(n, [{ op: 'remove', path: '/metadata/nothing' }])).toThrow(PatchError);
    expect(() => jsonPatch(n, [{ op: 'test', path: '/metadata/name', value: 'b' }])).toThrow(/testing value/);
  });
});

describe('stand-in API server: namespaces, pods and network policies', () => {
  let s: KubeApiServer;
  beforeAll(async () => {
    s = await startKubeApiServer({
      historyLimit: 50,
      users: [
        { name: 'admin', token: 'adm', role: 'admin' },
        { name: 'flannel', token: 'fl', role: 'flannel' },
        { name: 'flannel-np', token: 'np', role: ['flannel', 'network-policy'] },
      ],
    });
  });
  afterAll(() => s.stop());
  const adm = { authorization: 'Bearer adm' };
  const np = (name: string, extra: object = {}) => ({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name }, spec: { podSelector: { matchLabels: { app: 'db' } } }, ...extra });

  it('a Namespace is labelled with its name and Active; objects are created only in a namespace that exists', async () => {
    const ns = await call(s.url, 'POST', '/api/v1/namespaces', { metadata: { name: 'x', labels: { team: 'a' } } }, adm);
    expect(ns.status).toBe(201);
    expect(ns.body).toMatchObject({ kind: 'Namespace', apiVersion: 'v1', metadata: { name: 'x', labels: { team: 'a', 'kubernetes.io/metadata.name': 'x' } }, status: { phase: 'Active' } });
    const missing = await call(s.url, 'POST', '/apis/networking.k8s.io/v1/namespaces/nope/networkpolicies', np('p'), adm);
    expect(missing.body).toMatchObject({ code: 404, reason: 'NotFound', message: 'namespaces "nope" not found' });
    // the name label cannot be taken away
    await call(s.url, 'PATCH', '/api/v1/namespaces/x', { metadata: { labels: { 'kubernetes.io/metadata.name': null, team: 'b' } } }, { ...adm, ...merge });
    expect((await s.get('namespaces', 'x'))!.metadata.labels).toEqual({ team: 'b', 'kubernetes.io/metadata.name': 'x' });
  });

  it('a NetworkPolicy is stored as given (no defaulting of policyTypes), read back, listed across namespaces, patched and deleted', async () => {
    const created = await call(s.url, 'POST', '/apis/networking.k8s.io/v1/namespaces/x/networkpolicies', np('p1'), adm);
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ kind: 'NetworkPolicy', apiVersion: 'networking.k8s.io/v1', metadata: { name: 'p1', namespace: 'x' } });
    expect(created.body.spec).toEqual({ podSelector: { matchLabels: { app: 'db' } } });
    expect((await call(s.url, 'GET', '/apis/networking.k8s.io/v1/namespaces/x/networkpolicies/p1', undefined, adm)).body.metadata.uid).toBe(created.body.metadata.uid);
    const all = await call(s.url, 'GET', '/apis/networking.k8s.io/v1/networkpolicies', undefined, adm);
    expect(all.body.kind).toBe('NetworkPolicyList');
    expect(all.body.items.map((p: any) => `${p.metadata.namespace}/${p.metadata.name}`)).toEqual(['x/p1']);
    // a strategic merge patch replaces NetworkPolicySpec's lists (they have no merge strategy)
    await call(s.url, 'PATCH', '/apis/networking.k8s.io/v1/namespaces/x/networkpolicies/p1', { spec: { ingress: [{ ports: [{ port: 80 }] }] } }, { ...adm, ...strategic });
    await call(s.url, 'PATCH', '/apis/networking.k8s.io/v1/namespaces/x/networkpolicies/p1', { spec: { ingress: [{ ports: [{ port: 81 }] }] } }, { ...adm, ...strategic });
    expect((await s.get('networkpolicies', 'x/p1'))!.spec.ingress).toEqual([{ ports: [{ port: 81 }] }]);
    expect((await call(s.url, 'DELETE', '/apis/networking.k8s.io/v1/namespaces/x/networkpolicies/p1', undefined, adm)).body.status).toBe('Success');
    expect((await call(s.url, 'GET', '/apis/networking.k8s.io/v1/namespaces/x/networkpolicies/p1', undefined, adm)).body).toMatchObject({ code: 404, message: 'networkpolicies.networking.k8s.io "p1" not found' });
  });

  it('pods: Pending when created over the API, their status written through /status only, field and label selectors', async () => {
    const pod = { metadata: { name: 'a', labels: { app: 'web' } }, spec: { nodeName: 'n1', containers: [{ name: 'c', image: 'i' }] }, status: { phase: 'Running' } };
    const created = await call(s.url, 'POST', '/api/v1/namespaces/x/pods', pod, adm);
    expect(created.body.status).toEqual({ phase: 'Pending' });
    await call(s.url, 'PATCH', '/api/v1/namespaces/x/pods/a/status', { status: { phase: 'Running', podIPs: [{ ip: '10.0.0.5' }] } }, { ...adm, ...strategic });
    await call(s.url, 'PATCH', '/api/v1/namespaces/x/pods/a', { status: { phase: 'Failed' }, metadata: { labels: { tier: '1' } } }, { ...adm, ...strategic });
    const now = (await s.get('pods', 'x/a'))!;
    expect([now.status.phase, now.status.podIPs, now.metadata.labels]).toEqual(['Running', [{ ip: '10.0.0.5' }], { app: 'web', tier: '1' }]);
    await s.create('pods', { metadata: { namespace: 'x', name: 'b', labels: { app: 'db' } }, spec: { nodeName: 'n2' }, status: { phase: 'Running' } });
    const names = async (q: string) => (await call(s.url, 'GET', `/api/v1/pods?${q}`, undefined, adm)).body.items.map((p: any) => p.metadata.name);
    expect(await names('fieldSelector=spec.nodeName%3Dn1')).toEqual(['a']);
    expect(await names('labelSelector=app%20in%20(db,web),tier')).toEqual(['a']);
    expect(await names('fieldSelector=metadata.namespace%3Dx,status.phase%3DRunning')).toEqual(['a', 'b']);
    expect((await call(s.url, 'GET', '/api/v1/pods?fieldSelector=spec.hostNetwork%3Dtrue', undefined, adm)).body).toMatchObject({ code: 400, message: 'field label not supported: spec.hostNetwork' });
  });

  it('a watch of one namespace sees only it; deleting a namespace deletes its objects first (each a DELETED event)', async () => {
    await s.create('namespaces', { metadata: { name: 'y' } });
    await s.create('pods', { metadata: { namespace: 'y', name: 'c' }, spec: {} });
    const rv = (await call(s.url, 'GET', '/api/v1/pods', undefined, adm)).body.metadata.resourceVersion;
    const w = watch(s.url, `resourceVersion=${rv}`, '/api/v1/namespaces/y/pods', adm);
    const events = w.events;
    await waitFor('the watch to open', async () => (await s.openWatches()) > 0);
    await s.patch('pods', 'x/a', { metadata: { labels: { seen: 'no' } } });
    await s.create('pods', { metadata: { namespace: 'y', name: 'd' }, spec: {} });
    expect(await s.delete('namespaces', 'y')).toBe(true);
    await waitFor('three events', () => events.length === 3);
    expect(events.map((e) => `${e.type} ${e.object.metadata.namespace}/${e.object.metadata.name}`)).toEqual(['ADDED y/d', 'DELETED y/c', 'DELETED y/d']);
    w.close();
    expect((await s.list('pods')).map((p) => p.metadata.name)).toEqual(['a', 'b']);
  });

  it('RBAC: the flannel role cannot list pods; with the network-policy role it lists and watches pods, namespaces and network policies, and writes none', async () => {
    const fl = { authorization: 'Bearer fl' };
    const npUser = { authorization: 'Bearer np' };
    expect((await call(s.url, 'GET', '/api/v1/pods', undefined, fl)).body).toMatchObject({
      code: 403,
      message: 'pods is forbidden: User "flannel" cannot list resource "pods" in API group "" at the cluster scope',
    });
    for (const path of ['/api/v1/pods', '/api/v1/namespaces', '/apis/networking.k8s.io/v1/networkpolicies', '/api/v1/pods?watch=1&timeoutSeconds=1&fieldSelector=metadata.name%3Dnone']) {
      expect((await call(s.url, 'GET', path, undefined, npUser)).status, path).toBe(200);
    }
    expect((await call(s.url, 'GET', '/api/v1/namespaces/x/pods/a', undefined, npUser)).status).toBe(200); // flannel's own: get pods
    const write = await call(s.url, 'POST', '/apis/networking.k8s.io/v1/namespaces/x/networkpolicies', np('p2'), npUser);
    expect(write.body).toMatchObject({ code: 403, message: 'networkpolicies.networking.k8s.io is forbidden: User "flannel-np" cannot create resource "networkpolicies" in API group "networking.k8s.io" in the namespace "x"' });
  });

  it('tables: kubectl\'s columns for pods, namespaces and network policies', async () => {
    await s.create('networkpolicies', np('p3', { metadata: { name: 'p3', namespace: 'x' }, spec: { podSelector: { matchLabels: { b: '2', a: '1' }, matchExpressions: [{ key: 'c', operator: 'NotIn', values: ['z', 'y'] }] } } }));
    const table = async (path: string) => (await call(s.url, 'GET', path, undefined, { ...adm, accept: 'application/json;as=Table;v=v1;g=meta.k8s.io' })).body;
    const p = await table('/apis/networking.k8s.io/v1/namespaces/x/networkpolicies');
    expect(p.columnDefinitions.map((c: any) => c.name)).toEqual(['Name', 'Pod-Selector', 'Age']);
    expect(p.rows[0].cells.slice(0, 2)).toEqual(['p3', 'a=1,b=2,c notin (y,z)']);
    const pods = await table('/api/v1/namespaces/x/pods');
    expect(pods.columnDefinitions.map((c: any) => c.name).slice(0, 5)).toEqual(['Name', 'Ready', 'Status', 'Restarts', 'Age']);
    expect(pods.rows[0].cells.slice(0, 4)).toEqual(['a', '0/1', 'Running', '0']);
    expect((await table('/api/v1/namespaces')).rows.map((r: any) => r.cells.slice(0, 2))).toEqual([['x', 'Active']]);
  });

  it('discovery and OpenAPI v3 name the kinds (kubectl apply reads them), a protobuf body is 415', async () => {
    const apis = (await call(s.url, 'GET', '/apis', undefined, adm)).body;
    expect(apis.groups.map((g: any) => g.name)).toEqual(['networking.k8s.io']);
    const core = (await call(s.url, 'GET', '/api/v1', undefined, adm)).body.resources.map((r: any) => r.name);
    expect(core).toEqual(['nodes', 'nodes/status', 'namespaces', 'namespaces/status', 'pods', 'pods/status']);
    const v3 = (await call(s.url, 'GET', '/openapi/v3/apis/networking.k8s.io/v1', undefined, adm)).body;
    expect(v3.paths['/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/{name}'].patch['x-kubernetes-group-version-kind']).toEqual({ group: 'networking.k8s.io', version: 'v1', kind: 'NetworkPolicy' });
    const proto = await call(s.url, 'POST', '/api/v1/namespaces', { metadata: { name: 'z' } }, { ...adm, 'content-type': 'application/vnd.kubernetes.protobuf' });
    expect(proto.status).toBe(415);
  });
});
