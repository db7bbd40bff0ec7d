// The informer on Nodes against the stand-in API server (in-process, loopback, plain
// HTTP: the TLS paths are the client's tests): the first list, live changes,
// resuming a broken or ended watch from the last resourceVersion without a
// list and without missing a change, listing again after 410 Gone (forced,
// or a history that moved on) with the difference reported, bookmarks moving
// the resourceVersion on, bounded backoff while the server is away.
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { KubeClient } from '../../../../src/flannel/kube/client';
import { Change, Informer } from '../../../../src/flannel/kube/informer';
import { NODES, PODS, type KubeObject } from '../../../../src/flannel/kube/resource';
import type { KubeNode } from '../../../../src/flannel/kube/node';
import { KubeApiServer, RequestRecord, startKubeApiServer } from '../../../support/kube-apiserver';
import { freePort } from '../../../support/ports';
import { waitFor } from '../../../support/wait';

const node = (name: string) => ({ metadata: { name, annotations: { 'flannel.alpha.coreos.com/kube-subnet-manager': 'true' } }, spec: { podCIDR: '10.244.1.0/24' } });

describe('the informer, on Nodes', () => {
  let server: KubeApiServer;
  let watch: Informer<KubeNode> | undefined;
  let client: KubeClient;
  let changes: string[];
  let errors: string[];
  let relists: string[];

  beforeAll(async () => {
    server = await startKubeApiServer({ historyLimit: 5 });
    client = new KubeClient({ server: server.url, description: 'test' });
  });
  afterAll(async () => {
    client.close();
    await server.stop();
  });
  afterEach(async () => {
    watch?.stop();
    watch = undefined;
    for (const n of await server.listNodes()) await server.deleteNode(n.metadata.name);
  });

  const describeChange = (c: Change<KubeNode>) => `${c.type} ${c.key}`;
  const startWatch = async (opts = {}) => {
    changes = [];
    errors = [];
    relists = [];
    await server.clearRequests();
    watch = new Informer<KubeNode>(client, NODES, { onChange: (c) => changes.push(describeChange(c)), onError: (e) => errors.push(e.message), onRelist: (why) => relists.push(why) }, opts);
    await watch.start();
    await waitFor('the watch to open', async () => (await server.openWatches()) === 1);
    return watch;
  };
  const lists = (log: RequestRecord[]) => log.filter((r) => r.path === '/api/v1/nodes' && !r.query.watch && !r.control);
  const watches = (log: RequestRecord[]) => log.filter((r) => r.query.watch === '1');

  it('lists every Node first, then reports changes as they come', async () => {
    await server.createNode(node('a'));
    await server.createNode(node('b'));
    const w = await startWatch();
    expect(changes).toEqual(['ADDED a', 'ADDED b']);
    expect([...w.objects().keys()]).toEqual(['a', 'b']);
    await server.patchNode('a', { metadata: { annotations: { x: '1' } } });
    await server.createNode(node('c'));
    await server.deleteNode('b');
    await waitFor('three changes', () => changes.length === 5);
    expect(changes.slice(2)).toEqual(['MODIFIED a', 'ADDED c', 'DELETED b']);
    expect(w.objects().get('a')!.metadata.annotations!.x).toBe('1');
    expect([...w.objects().keys()].sort()).toEqual(['a', 'c']);
    const log = await server.requests();
    expect(lists(log)).toHaveLength(1);
    expect(watches(log)[0].query).toMatchObject({ allowWatchBookmarks: 'true', resourceVersion: expect.stringMatching(/^\d+$/) });
  });

  it('lists in pages (limit, continue), all at the first page\'s resourceVersion: a change between pages comes by the watch', async () => {
    for (const n of ['a', 'b', 'c', 'd', 'e']) await server.createNode(node(n));
    let kept = 0;
    const keep = (n: any) => {
      // while the first page is read: a change the later pages must not show, and the watch must bring
      if (kept++ === 0) void server.patchNode('e', { metadata: { annotations: { x: '1' } } });
      return n;
    };
    const w = await startWatch({ pageSize: 2, keep });
    expect(changes.slice(0, 5)).toEqual(['ADDED a', 'ADDED b', 'ADDED c', 'ADDED d', 'ADDED e']);
    const pages = lists(await server.requests());
    expect(pages.map((r) => [r.query.limit, r.query.continue ? 'continue' : 'first', r.status])).toEqual([['2', 'first', 200], ['2', 'continue', 200], ['2', 'continue', 200]]);
    await waitFor('the change made between pages', () => changes.length === 6);
    expect(changes[5]).toBe('MODIFIED e');
    expect(w.objects().get('e')!.metadata.annotations!.x).toBe('1');
    expect(relists).toEqual([]);
  });

  it('lists again from the first page when a continue token expired (410), reporting each Node once', async () => {
    for (const n of ['a', 'b', 'c', 'd', 'e']) await server.createNode(node(n));
    await server.expireContinueTokens(1);
    const w = await startWatch({ pageSize: 2 });
    expect(changes).toEqual(['ADDED a', 'ADDED b', 'ADDED c', 'ADDED d', 'ADDED e']);
    expect([...w.objects().keys()].sort()).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(relists).toEqual([expect.stringMatching(/continue token expired .*410 Expired/)]);
    const pages = lists(await server.requests());
    expect(pages.map((r) => [r.query.continue ? 'continue' : 'first', r.status])).toEqual([['first', 200], ['continue', 410], ['first', 200], ['continue', 200], ['continue', 200]]);
    expect(errors).toEqual([]);
  });

  it('notices a Node deleted, or losing its annotations, within 3 s', async () => {
    await server.createNode(node('d'));
    const w = await startWatch();
    await server.patchNode('d', { metadata: { annotations: { 'flannel.alpha.coreos.com/kube-subnet-manager': null } } });
    await waitFor('the annotation loss', () => w.objects().get('d')?.metadata.annotations?.['flannel.alpha.coreos.com/kube-subnet-manager'] === undefined);
    await server.deleteNode('d');
    await waitFor('the deletion', () => !w.objects().has('d'));
    expect(changes).toEqual(['ADDED d', 'MODIFIED d', 'DELETED d']);
  });

  it('resumes a broken stream from the last resourceVersion: no list, no change missed', async () => {
    await server.createNode(node('a'));
    const w = await startWatch();
    await server.patchNode('a', { metadata: { labels: { step: '1' } } });
    await waitFor('the first change', () => changes.length === 2);
    const seen = w.resourceVersion;
    expect(await server.dropWatches()).toBe(1);
    // made while the client is between two watches
    await server.patchNode('a', { metadata: { labels: { step: '2' } } });
    await server.createNode(node('b'));
    await waitFor('both changes', () => changes.length === 4);
    expect(changes).toEqual(['ADDED a', 'MODIFIED a', 'MODIFIED a', 'ADDED b']);
    expect(w.objects().get('a')!.metadata.labels).toEqual({ step: '2' });
    const log = await server.requests();
    expect(lists(log)).toHaveLength(1);
    expect(watches(log).map((r) => r.query.resourceVersion)).toContain(seen);
    expect(errors).toEqual([expect.stringMatching(/GET http:\/\/127\.0\.0\.1:\d+\/api\/v1\/nodes\?watch=1.*: the watch stream broke/)]);
    expect(relists).toEqual([]);
  });

  it('opens the next watch when the server ends one (its timeoutSeconds), from where it was', async () => {
    await server.createNode(node('a'));
    await startWatch({ watchTimeoutS: () => 1 });
    await waitFor('a second watch', async () => watches(await server.requests()).length === 2);
    await server.patchNode('a', { metadata: { labels: { after: 'timeout' } } });
    await waitFor('the change', () => changes.length === 2);
    const log = await server.requests();
    expect(watches(log).map((r) => r.query.timeoutSeconds)).toEqual(['1', '1']);
    expect(lists(log)).toHaveLength(1);
    expect(errors).toEqual([]);
  });

  it('keeps a key alone when retain keeps nothing of its object: a change of it is MODIFIED, and a new list still finds it gone', async () => {
    await server.createNode(node('a'));
    await server.createNode(node('b'));
    const w = await startWatch({ retain: () => undefined });
    expect([...w.objects()]).toEqual([['a', undefined], ['b', undefined]]);
    await server.patchNode('a', { metadata: { annotations: { x: '1' } } });
    await waitFor('the change', () => changes.length === 3);
    expect(changes[2]).toBe('MODIFIED a');
    // a Node deleted while the watch is broken: the new list reports it (without an object: none was kept)
    await server.forceGone();
    await server.dropWatches();
    await server.deleteNode('b');
    await waitFor('the re-list', () => !w.objects().has('b'));
    expect(changes.filter((c) => c === 'DELETED b')).toHaveLength(1);
    expect([...w.objects().keys()]).toEqual(['a']);
  });

  it('lists again after a forced 410 and reports what changed meanwhile (a Node gone, one added)', async () => {
    await server.createNode(node('a'));
    await server.createNode(node('b'));
    const w = await startWatch();
    // changes the watch will never see: the next watch is answered 410
    await server.forceGone();
    await server.dropWatches();
    await server.deleteNode('a');
    await server.createNode(node('c'));
    await waitFor('the re-list', () => !w.objects().has('a') && w.objects().has('c'));
    // the broken stream may already have resumed and seen these before the 410: either way each is reported once
    expect(changes.filter((c) => c === 'DELETED a')).toHaveLength(1);
    expect(changes.filter((c) => c === 'ADDED c')).toHaveLength(1);
    expect(relists).toEqual([expect.stringMatching(/watch ERROR 410 Expired: too old resource version/)]);
    expect(lists(await server.requests())).toHaveLength(2);
  });

  it('lists again when the history moved past its resourceVersion while it was away', async () => {
    await server.createNode(node('a'));
    const w = await startWatch({ backoff: { initialMs: 300, maxMs: 300 } });
    await server.dropWatches();
    // more changes than the server's history holds, before the client is back (it waits 300 ms)
    for (let i = 0; i < 7; i++) await server.patchNode('a', { metadata: { labels: { n: String(i) } } });
    await waitFor('the re-list', () => relists.length === 1);
    await waitFor('the last change', () => w.objects().get('a')?.metadata.labels?.n === '6');
    expect(relists[0]).toMatch(/too old resource version/);
  });

  it('moves its resourceVersion on with bookmarks, and resumes from there', async () => {
    await server.createNode(node('a'));
    const w = await startWatch();
    const rv = await server.bumpResourceVersion(5); // writes to other resources
    expect(w.resourceVersion).not.toBe(rv);
    expect(await server.sendBookmarks()).toBe(1);
    await waitFor('the bookmark', () => w.resourceVersion === rv);
    expect(changes).toEqual(['ADDED a']); // a bookmark is no change
    await server.dropWatches();
    await waitFor('a watch from the bookmark', async () => watches(await server.requests()).some((r) => r.query.resourceVersion === rv));
  });

  it('retries a server that is away with a bounded backoff, reporting each failure, and stops when asked', async () => {
    const port = await freePort();
    const away = new KubeClient({ server: `http://127.0.0.1:${port}`, description: 'test' });
    const times: number[] = [];
    const failures: string[] = [];
    // the pauses the watch asks for (a busy machine stretches the gaps between failures, never the asks);
    // the client's own timers are seconds long, the test's polls 10 ms
    const asked: number[] = [];
    const realSetTimeout = globalThis.setTimeout;
    vi.spyOn(globalThis, 'setTimeout').mockImplementation(((fn: () => void, ms?: number, ...rest: unknown[]) => {
      if (ms !== undefined && ms >= 40 && ms <= 640) asked.push(ms);
      return realSetTimeout(fn, ms, ...(rest as []));
    }) as typeof setTimeout);
    const w = new Informer<KubeNode>(away, NODES, { onChange: () => {}, onError: (e) => (times.push(Date.now()), failures.push(e.message)) }, { backoff: { initialMs: 40, maxMs: 160 } });
    const started = w.start();
    await waitFor('six failures', () => times.length >= 6);
    w.stop();
    await started;
    vi.restoreAllMocks();
    expect(asked.slice(0, 5)).toEqual([40, 80, 160, 160, 160]); // doubling without a bound would ask 320, 640
    const gaps = times.slice(1).map((t, i) => t - times[i]);
    expect(gaps.slice(0, 3).every((g, i) => g >= 40 * 2 ** i - 5)).toBe(true);
    expect(failures[0]).toBe(`GET http://127.0.0.1:${port}/api/v1/nodes?limit=500: connect ECONNREFUSED 127.0.0.1:${port}`);
    // `started` resolved: the retry loop has ended (stop() cut its pause short), and the watch loop
    // after it sees the stop before its first request, so no failure can follow; a loop that ignored
    // stop() would have kept start() from resolving and failed the test on its timeout.
    away.close();
  });

  it('takes a watch that brings nothing, not even a bookmark, for watchIdleMs as broken, and resumes it', async () => {
    await server.createNode(node('a'));
    const quiet = new KubeClient({ server: server.url, description: 'test' }, { watchIdleMs: 300 });
    try {
      changes = [];
      errors = [];
      await server.clearRequests();
      watch = new Informer<KubeNode>(quiet, NODES, { onChange: (c) => changes.push(describeChange(c)), onError: (e) => errors.push(e.message) }, { backoff: { initialMs: 10, maxMs: 10 } });
      await watch.start();
      await waitFor('a second watch', async () => watches(await server.requests()).length >= 2);
      expect(errors[0]).toMatch(/api\/v1\/nodes\?watch=1.*: no event or bookmark for 0.3 s$/);
      await server.patchNode('a', { metadata: { labels: { still: 'seen' } } });
      await waitFor('the change', () => changes.includes('MODIFIED a'));
      expect(lists(await server.requests())).toHaveLength(1);
    } finally {
      watch?.stop();
      quiet.close();
    }
  });

  it('stop() closes the watch', async () => {
    const w = await startWatch();
    w.stop();
    await waitFor('no open watch', async () => (await server.openWatches()) === 0);
    watch = undefined;
  });
});

describe('the informer, on a namespaced collection (Pods)', () => {
  let server: KubeApiServer;
  let client: KubeClient;
  beforeAll(async () => {
    server = await startKubeApiServer({ historyLimit: 3 });
    client = new KubeClient({ server: server.url, description: 'test' });
  });
  afterAll(async () => {
    client.close();
    await server.stop();
  });

  it('keys each object by namespace/name across namespaces, in pages; what is kept is what `keep` makes; a relist after 410 reports the difference', async () => {
    for (const ns of ['x', 'y']) await server.create('namespaces', { metadata: { name: ns } });
    for (const key of ['x/a', 'y/a', 'y/b']) {
      const [namespace, name] = key.split('/');
      await server.create('pods', { metadata: { namespace, name, labels: { app: name } }, spec: { containers: [{ name: 'c', image: 'i'.repeat(1000) }] } });
    }
    const changes: string[] = [];
    const relists: string[] = [];
    type Slim = KubeObject & { app?: string };
    const w = new Informer<Slim>(client, PODS, { onChange: (c) => changes.push(`${c.type} ${c.key} ${c.object?.app}`), onError: () => {}, onRelist: (why) => relists.push(why) }, {
      pageSize: 2,
      keep: (p) => ({ metadata: { name: p.metadata.name, namespace: p.metadata.namespace, resourceVersion: p.metadata.resourceVersion }, app: p.metadata.labels?.app }),
    });
    try {
      await w.start();
      expect(changes).toEqual(['ADDED x/a a', 'ADDED y/a a', 'ADDED y/b b']);
      expect(w.objects().get('y/b')).toEqual({ metadata: { name: 'b', namespace: 'y', resourceVersion: expect.any(String) }, app: 'b' });
      await waitFor('the watch to open', async () => (await server.openWatches()) === 1);
      await server.patch('pods', 'y/a', { metadata: { labels: { app: 'z' } } });
      await waitFor('the change', () => changes.length === 4);
      expect(changes[3]).toBe('MODIFIED y/a z');
      // missed changes (the history moves past the watch), then 410: listed again, the difference reported
      await server.forceGone(1);
      await server.dropWatches();
      await server.delete('pods', 'x/a');
      await server.create('pods', { metadata: { namespace: 'x', name: 'c', labels: { app: 'c' } }, spec: {} });
      await waitFor('the relist', () => relists.length === 1 && changes.length === 6);
      expect(changes.slice(4).sort()).toEqual(['ADDED x/c c', 'DELETED x/a a']);
    } finally {
      w.stop();
    }
  });
});
