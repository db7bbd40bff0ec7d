// A broken or hostile API server must not stop or starve the daemon: watch
// lines of the wrong shape are a broken watch (listed again), an answer or a
// watch line past its limit is aborted, a line is scanned once however many
// chunks it comes in, a handler's exception stays inside the informer, and
// a Node's fields of the wrong type never reach the code that reads a lease.
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import fc from 'fast-check';
import { KubeClient } from '../../../../src/flannel/kube/client';
import { Informer } from '../../../../src/flannel/kube/informer';
import { NODES } from '../../../../src/flannel/kube/resource';
import { LineSplitter, parseWatchEvent } from '../../../../src/flannel/kube/watch-stream';
import { slimNode } from '../../../../src/flannel/kube/kube-manager';
import { annotationNames, nodeLease } from '../../../../src/flannel/kube/annotations';
import type { KubeNode } from '../../../../src/flannel/kube/node';
import { KubeApiServer, startKubeApiServer } from '../../../support/kube-apiserver';
import { waitFor } from '../../../support/wait';

const MiB = 2 ** 20;
const node = (name: string) => ({ metadata: { name, annotations: { 'flannel.alpha.coreos.com/kube-subnet-manager': 'true' } }, spec: { podCIDR: '10.244.1.0/24' } });

describe('a watch line', () => {
  it('is cut at newlines across chunks, multi-byte characters split between chunks included', () => {
    const s = new LineSplitter(1024);
    const text = Buffer.from('{"a":"é"}\n{"b":"日本"}\n\n{"c":1}');
    const lines: string[] = [];
    for (let i = 0; i < text.length; i += 3) lines.push(...s.push(text.subarray(i, i + 3)));
    expect(lines).toEqual(['{"a":"é"}', '{"b":"日本"}', '']);
    expect(s.pending).toBe(true);
    expect(s.push(Buffer.from('\n'))).toEqual(['{"c":1}']);
    expect(s.pending).toBe(false);
  });

  it('is cut whole from one chunk holding several lines, and the rest kept for the next', () => {
    const s = new LineSplitter(1024);
    expect(s.push(Buffer.from('{"a":"é"}\n{"b":"日本"}\n{"c"'))).toEqual(['{"a":"é"}', '{"b":"日本"}']);
    expect(s.push(Buffer.from(':1}\n{"d":2}\n'))).toEqual(['{"c":1}', '{"d":2}']);
    expect(s.pending).toBe(false);
    // exactly at the limit is a line; one byte more is not, whole in its chunk or not
    expect(new LineSplitter(10).push(Buffer.from(`${'x'.repeat(10)}\n`))).toEqual(['x'.repeat(10)]);
    expect(() => new LineSplitter(10).push(Buffer.from(`${'x'.repeat(11)}\n`))).toThrow('a line longer than 0 MiB (the limit)');
  });

  it('may not grow past its limit, in one chunk or in many', () => {
    expect(() => new LineSplitter(10).push(Buffer.from('x'.repeat(11)))).toThrow('a line longer than 0 MiB (the limit)');
    const s = new LineSplitter(MiB);
    for (let i = 0; i < 16; i++) s.push(Buffer.alloc(MiB / 16, 'a'));
    expect(() => s.push(Buffer.from('a'))).toThrow('a line longer than 1 MiB (the limit)');
  });

  it('is searched for a newline once per byte, however many chunks it comes in', () => {
    const spy = vi.spyOn(Buffer.prototype, 'indexOf');
    let scanned = 0;
    spy.mockImplementation(function (this: Buffer, value: unknown, from?: unknown) {
      const start = typeof from === 'number' ? from : 0;
      const found = Uint8Array.prototype.indexOf.call(this, value as number, start);
      scanned += (found < 0 ? this.length : found + 1) - start;
      return found;
    } as typeof Buffer.prototype.indexOf);
    try {
      const s = new LineSplitter(4 * MiB);
      const chunks = 4096;
      for (let i = 0; i < chunks; i++) s.push(Buffer.alloc(512, 'a'));
      const lines = s.push(Buffer.from('\n'));
      expect(lines[0]).toHaveLength(chunks * 512);
      expect(scanned).toBeLessThanOrEqual(chunks * 512 + 1);
    } finally {
      spy.mockRestore();
    }
  });

  it('is an event only as an object with a known type and an object', () => {
    expect(parseWatchEvent('{"type":"ADDED","object":{"metadata":{"name":"a"}}}')).toEqual({ type: 'ADDED', object: { metadata: { name: 'a' } } });
    const refused: [string, string][] = [
      ['null', 'an event that is not a JSON object: "null"'],
      ['[1]', 'an event that is not a JSON object'],
      ['"ADDED"', 'an event that is not a JSON object'],
      ['{"type":"ADDED","object":null}', 'an event (ADDED) whose object is not a JSON object'],
      ['{"type":"MODIFIED","object":[]}', 'an event (MODIFIED) whose object is not a JSON object'],
      ['{"type":"DELETED"}', 'an event (DELETED) whose object is not a JSON object'],
      ['{"type":"EXPLODED","object":{}}', 'an event of unknown type'],
      ['{"type":5,"object":{}}', 'an event of unknown type'],
      ['{"type":"ADDED","obj', 'a line that is not JSON'],
    ];
    for (const [line, message] of refused) expect(() => parseWatchEvent(line), line).toThrow(message);
  });
});

describe('the informer against a hostile API server', () => {
  let server: KubeApiServer;
  let watch: Informer<KubeNode> | undefined;
  const clients: KubeClient[] = [];
  let changes: string[];
  let errors: string[];
  let relists: string[];

  beforeAll(async () => {
    server = await startKubeApiServer();
  });
  afterAll(async () => {
    for (const c of clients) c.close();
    await server.stop();
  });
  afterEach(async () => {
    watch?.stop();
    watch = undefined;
    for (const n of await server.listNodes()) await server.deleteNode(n.metadata.name);
  });

  const start = async (opts: ConstructorParameters<typeof KubeClient>[1] = {}, onChange?: () => void) => {
    const client = new KubeClient({ server: server.url, description: 'test' }, opts);
    clients.push(client);
    [changes, errors, relists] = [[], [], []];
    watch = new Informer<KubeNode>(
      client,
      NODES,
      {
        onChange: (c) => (changes.push(`${c.type} ${c.object?.metadata.name}`), onChange?.()),
        onError: (e) => errors.push(e.message),
        onRelist: (why) => relists.push(why),
      },
      { backoff: { initialMs: 10, maxMs: 50 } },
    );
    await watch.start();
    await waitFor('the watch to open', async () => (await server.openWatches()) === 1);
  };

  for (const [what, text] of [
    ['an ADDED event with a null object', '{"type":"ADDED","object":null}\n'],
    ['a bare null', 'null\n'],
    ['an array', '[{"type":"ADDED"}]\n'],
    ['an object without a name', '{"type":"MODIFIED","object":{"metadata":{"name":7}}}\n'],
    ['a line that is not JSON', '{"type":\n'],
  ]) {
    it(`takes ${what} as a broken watch: lists again, and goes on`, async () => {
      await server.createNode(node('a'));
      await start();
      expect(await server.sendRawWatchText(text)).toBe(1);
      await waitFor('a list again', () => relists.length === 1);
      expect(relists[0]).toMatch(/api\/v1\/nodes\?watch=1.*: the watch is broken: /);
      await waitFor('a new watch', async () => (await server.openWatches()) === 1);
      await server.createNode(node('b'));
      await waitFor('the next change', () => changes.includes('ADDED b'));
      expect([...watch!.objects().keys()].sort()).toEqual(['a', 'b']);
    });
  }

  it('aborts a list answer past its limit (the request is closed, not read to the end), and lists again later', async () => {
    await server.createNode(node('a'));
    await server.oversizeNextList(48 * MiB);
    await start({ maxBodyBytes: 8 * MiB });
    expect(errors[0]).toMatch(/^GET .*\/api\/v1\/nodes\?limit=500: the answer is larger than 8 MiB \(the limit\): aborted$/);
    const sent = await server.oversizedListResult();
    expect(sent?.closedByClient).toBe(true);
    expect(sent!.written).toBeLessThan(48 * MiB);
    expect(changes).toEqual(['ADDED a']);
  });

  it('takes a watch line past its limit as broken (a line without a newline is not held forever)', async () => {
    await server.createNode(node('a'));
    await start({ maxWatchLineBytes: MiB });
    await server.sendRawWatchText(`{"type":"ADDED","object":{"metadata":{"name":"${'x'.repeat(2 * MiB)}`);
    await waitFor('a list again', () => relists.length === 1);
    expect(relists[0]).toMatch(/the watch is broken: it sent a line longer than 1 MiB \(the limit\)$/);
    await server.createNode(node('b'));
    await waitFor('the next change', () => changes.includes('ADDED b'));
  });

  it('reports what a change handler throws and goes on watching', async () => {
    let throwing = true;
    await start({}, () => {
      if (throwing) throw new TypeError('a bug in a handler');
    });
    await server.createNode(node('a'));
    await waitFor('the failure reported', () => errors.length === 1);
    expect(errors[0]).toBe('node "a" added: a bug in a handler');
    throwing = false;
    await server.createNode(node('b'));
    await waitFor('the next change', () => changes.includes('ADDED b'));
    expect(relists).toEqual([]);
  });
});

describe('a Node with fields of the wrong types', () => {
  const names = annotationNames();
  it('reads as a lease or a reason, never as an exception', () => {
    const anything = fc.oneof(fc.jsonValue(), fc.constant(null));
    const nodeLike = fc.record(
      {
        metadata: fc.oneof(anything, fc.record({ name: anything, resourceVersion: anything, annotations: fc.oneof(anything, fc.dictionary(fc.constantFrom(...Object.values(names)), anything)) }, { requiredKeys: [] })),
        spec: fc.oneof(anything, fc.record({ podCIDR: anything, podCIDRs: fc.oneof(anything, fc.array(anything)) }, { requiredKeys: [] })),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(nodeLike, (raw) => {
        const slim = slimNode(raw as unknown as KubeNode, names);
        expect(typeof slim.metadata.name).toBe('string');
        nodeLease(slim, names); // returns; any exception fails the property
      }),
      { numRuns: 2000 },
    );
  });
});
