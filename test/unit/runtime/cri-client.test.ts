// The CRI client against an in-process gRPC server on a unix socket (a
// stand-in runtime answering from the same proto subset), and against
// endpoints that do not answer. The real thing, containerd, is in
// test/integration/cri-containerd.test.ts.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { status, type Server } from '@grpc/grpc-js';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer, type Server as NetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CriClient, CriError } from '../../../src/runtime/cri';
import { serveCri, type CriHandlers } from '../../support/cri-standin';
import { rejected } from '../../support/expect';

const dir = mkdtempSync(join(tmpdir(), 'cri-client-'));
const received: [string, unknown][] = [];
const CREATED_NS = '1763944000123456789';

/** What the stand-in runtime answers. */
const runtime: CriHandlers = {
  Version: () => ({ version: '0.1.0', runtimeName: 'fake', runtimeVersion: '9.9', runtimeApiVersion: 'v1' }),
  ListPodSandbox: () => ({
    items: [
      { id: 'aaa', metadata: { name: 'web', namespace: 'prod', uid: 'u-1', attempt: 2 }, state: 'SANDBOX_READY', createdAt: CREATED_NS, labels: { app: 'web' } },
      { id: 'bbb', metadata: { name: 'old', namespace: 'dev', uid: 'u-2' }, state: 'SANDBOX_NOTREADY', createdAt: '0', annotations: { a: 'b' }, runtimeHandler: 'runc' },
    ],
  }),
  PodSandboxStatus: (req) =>
    req.podSandboxId === 'aaa'
      ? {
          status: { id: 'aaa', metadata: { name: 'web', namespace: 'prod', uid: 'u-1' }, state: 'SANDBOX_READY', createdAt: CREATED_NS, network: { ip: '10.1.0.5', additionalIps: [{ ip: 'fd00::5' }] } },
          info: { info: '{"pid":1}' },
        }
      : Object.assign(new Error(`sandbox ${req.podSandboxId} not found`), { code: status.NOT_FOUND }),
  RunPodSandbox: () => ({ podSandboxId: 'new-id' }),
  StopPodSandbox: () => ({}),
  RemovePodSandbox: () => ({}),
};

/** The stand-in's handlers, each recording the request it got. */
const recorded = (methods: string[]): CriHandlers =>
  Object.fromEntries(
    methods.map((m) => [
      m,
      (req: unknown) => {
        received.push([m, req]);
        return runtime[m](req);
      },
    ]),
  );

const CRI_SOCK = join(dir, 'cri.sock');
const OTHER_SOCK = join(dir, 'other.sock');
const SILENT_SOCK = join(dir, 'silent.sock');
let cri: Server;
let other: Server;
let silent: NetServer;
const silentConnections: Socket[] = [];
const clients: CriClient[] = [];
const client = (endpoint: string, timeoutMs?: number) => {
  const c = new CriClient(endpoint, { timeoutMs });
  clients.push(c);
  return c;
};

beforeAll(async () => {
  cri = await serveCri(CRI_SOCK, recorded(Object.keys(runtime)));
  other = await serveCri(OTHER_SOCK, recorded(['Version']), 'runtime.v1alpha2.RuntimeService');
  silent = createServer((conn) => silentConnections.push(conn)); // accepts and never speaks
  await new Promise<void>((res) => silent.listen(SILENT_SOCK, res));
});
afterEach(() => {
  clients.splice(0).forEach((c) => c.close());
  received.length = 0;
});
afterAll(async () => {
  cri.forceShutdown();
  other.forceShutdown();
  silentConnections.forEach((c) => c.destroy());
  await new Promise((res) => silent.close(res));
  rmSync(dir, { recursive: true, force: true });
});


describe('CriClient against a runtime', () => {
  it('Version, at unix:///path and at a bare path', async () => {
    const expected = { version: '0.1.0', runtimeName: 'fake', runtimeVersion: '9.9', runtimeApiVersion: 'v1' };
    expect(await client(`unix://${CRI_SOCK}`).version()).toEqual(expected);
    expect(await client(CRI_SOCK).version()).toEqual(expected);
    expect(received).toEqual([
      ['Version', { version: '0.1.0' }],
      ['Version', { version: '0.1.0' }],
    ]);
  });

  it('ListPodSandbox asks for every sandbox (no filter) and returns each with its metadata', async () => {
    expect(await client(CRI_SOCK).listPodSandboxes()).toEqual([
      { id: 'aaa', name: 'web', namespace: 'prod', uid: 'u-1', attempt: 2, ready: true, createdAt: new Date(1763944000123), labels: { app: 'web' }, annotations: {}, runtimeHandler: '' },
      { id: 'bbb', name: 'old', namespace: 'dev', uid: 'u-2', attempt: 0, ready: false, createdAt: new Date(0), labels: {}, annotations: { a: 'b' }, runtimeHandler: 'runc' },
    ]);
    expect(received).toEqual([['ListPodSandbox', { filter: null }]]);
  });

  it('PodSandboxStatus gives the IPs, primary first, and the verbose info', async () => {
    const s = await client(CRI_SOCK).podSandboxStatus('aaa', { verbose: true });
    expect([s.id, s.name, s.ready, s.ips, s.info]).toEqual(['aaa', 'web', true, ['10.1.0.5', 'fd00::5'], { info: '{"pid":1}' }]);
    expect(received).toEqual([['PodSandboxStatus', { podSandboxId: 'aaa', verbose: true }]]);
  });

  it('RunPodSandbox sends the pod metadata; Stop and Remove name the sandbox', async () => {
    const c = client(CRI_SOCK);
    expect(await c.runPodSandbox({ name: 'p', namespace: 'ns', uid: 'u', labels: { l: '1' } })).toBe('new-id');
    await c.stopPodSandbox('new-id');
    await c.removePodSandbox('new-id');
    expect(received).toEqual([
      ['RunPodSandbox', { config: { metadata: { name: 'p', namespace: 'ns', uid: 'u', attempt: 0 }, hostname: '', logDirectory: '', labels: { l: '1' }, annotations: {} }, runtimeHandler: '' }],
      ['StopPodSandbox', { podSandboxId: 'new-id' }],
      ['RemovePodSandbox', { podSandboxId: 'new-id' }],
    ]);
  });

  it("passes on the runtime's own error as an answered failure naming the endpoint and the call", async () => {
    const err = await rejected(CriError, client(CRI_SOCK).podSandboxStatus('zzz'));
    expect([err.unavailable, err.grpcCode, err.message]).toEqual([false, status.NOT_FOUND, `container runtime at ${CRI_SOCK}: PodSandboxStatus failed: sandbox zzz not found`]);
  });
});

describe('CriClient when the runtime does not answer: an error, never an empty list', () => {
  it('no socket', async () => {
    const endpoint = `unix://${join(dir, 'missing.sock')}`;
    const err = await rejected(CriError, client(endpoint).listPodSandboxes());
    expect(err.unavailable).toBe(true);
    expect(err.message).toMatch(new RegExp(`^container runtime at ${endpoint} does not answer \\(ListPodSandbox: .*ENOENT`));
    expect(err.message).not.toMatch(/Resolution note/);
  });

  it('the socket of a runtime that was killed (nobody listens)', async () => {
    const sock = join(dir, 'dead.sock');
    const listenThenDie = `require('node:net').createServer().listen(${JSON.stringify(sock)}, () => process.kill(process.pid, 'SIGKILL'))`;
    spawnSync(process.execPath, ['-e', listenThenDie]);
    expect(statSync(sock).isSocket()).toBe(true);
    const err = await rejected(CriError, client(sock).listPodSandboxes());
    expect([err.unavailable, err.message]).toEqual([true, expect.stringMatching(/does not answer \(ListPodSandbox: .*ECONNREFUSED/)]);
  });

  it('a socket that accepts and never answers: a timeout', async () => {
    const err = await rejected(CriError, client(SILENT_SOCK, 300).listPodSandboxes());
    expect([err.unavailable, err.grpcCode, err.message]).toEqual([true, status.DEADLINE_EXCEEDED, `container runtime at ${SILENT_SOCK} did not answer ListPodSandbox within 0.3 s`]);
  });

  it('a gRPC server without runtime.v1 (wrong service)', async () => {
    const err = await rejected(CriError, client(OTHER_SOCK).listPodSandboxes());
    expect([err.unavailable, err.grpcCode]).toEqual([true, status.UNIMPLEMENTED]);
    expect(err.message).toMatch(new RegExp(`^${OTHER_SOCK} does not serve the CRI runtime.v1 RuntimeService \\(ListPodSandbox: `));
  });

  it.each(['tcp://127.0.0.1:1234', 'run/containerd/containerd.sock', 'unix://relative.sock', 'npipe:////./pipe/x'])('refuses endpoint %s', (endpoint) => {
    expect(() => new CriClient(endpoint)).toThrow(`runtime endpoint ${JSON.stringify(endpoint)} is not supported: expected unix:///path/to.sock or an absolute socket path`);
  });
});
