// A watch's connection (src/flannel/kube/streaming-get.ts) against a server
// written byte by byte here, over TCP and TLS: events that follow one another
// within the read interval come in one read, a lone event at once, a stream faster than one read
// per interval is read whole at each wake-up; what is not HTTP/1.1 is a
// broken watch (MALFORMED: listed again), and a stream cut mid-body is a
// broken one (resumed).
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createServer, type Server, type Socket } from 'node:net';
import { createServer as createTlsServer } from 'node:tls';
import { join } from 'node:path';
import { streamingGet } from '../../../../src/flannel/kube/streaming-get';
import { KubeApiError, KubeClient, MALFORMED } from '../../../../src/flannel/kube/client';
import { rejected } from '../../../support/expect';
import { waitFor } from '../../../support/wait';
import { TestCA } from '../../../support/pki';
import { tempDir } from '../../../integration/helpers';

const HEAD = 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n';
const chunk = (text: string) => `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`;
const event = (n: number) => `${JSON.stringify({ type: 'ADDED', object: { metadata: { name: `n${n}` } } })}\n`;

/** A server (over TLS with `tls`) that hands each connection (once its request came) to the test. */
async function rawServer(tls?: { cert: string; key: string }) {
  const conns: { socket: Socket; request: string }[] = [];
  const onConnection = (socket: Socket) => {
    let request = '';
    socket.on('data', (d) => {
      request += d.toString('latin1');
      if (request.endsWith('\r\n\r\n')) conns.push({ socket, request });
    });
    socket.on('error', () => {});
  };
  const server: Server = tls ? createTlsServer(tls, onConnection) : createServer(onConnection);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `${tls ? 'https' : 'http'}://127.0.0.1:${(server.address() as { port: number }).port}`;
  return {
    url,
    conns,
    close: () => {
      for (const c of conns) c.socket.destroy();
      server.close();
    },
  };
}

/** Writes each piece in its own write, the next once the last was handed to the kernel. */
const writeEach = async (socket: Socket, pieces: string[]) => {
  for (const p of pieces) await new Promise<void>((r) => socket.write(p, () => setTimeout(r, 2)));
};

describe('a watch\'s connection', () => {
  let server: Awaited<ReturnType<typeof rawServer>> | undefined;
  afterEach(() => server?.close());

  const tmp = tempDir('streaming-get');
  let ca: TestCA | undefined;
  afterAll(() => tmp.remove());

  it.each(['TCP', 'TLS'])('reads a lone event at once, and the events that follow it within the interval in one read (%s)', async (over) => {
    ca ??= new TestCA(join(tmp.path, 'pki'));
    const cert = over === 'TLS' ? ca.server('apiserver', ['127.0.0.1']) : undefined;
    server = await rawServer(cert && { cert: cert.certPem, key: cert.keyPem });
    // what one read brings comes in one turn of the event loop (a call per HTTP chunk, and over TLS
    // per record): the calls of one turn are one read
    const reads: string[] = [];
    let inTurn = false;
    const onBody = (b: Buffer) => {
      if (!inTurn) {
        reads.push('');
        inTurn = true;
        setImmediate(() => (inTurn = false));
      }
      reads[reads.length - 1] += b.toString();
    };
    const stream = streamingGet(
      { url: `${server.url}/api/v1/nodes?watch=1`, headers: { Accept: 'application/json' }, tls: { ca: ca.caPem }, idleMs: 60_000, readIntervalMs: 1500, maxErrorBodyBytes: 1024 },
      { body: onBody, end: () => {}, status: () => {}, error: (err) => reads.push(`error ${err.message}`) },
    );
    try {
      await waitFor('the request', () => server!.conns.length === 1);
      const { socket, request } = server.conns[0];
      expect(request).toBe('GET /api/v1/nodes?watch=1 HTTP/1.1\r\nHost: ' + new URL(server.url).host + '\r\nAccept: application/json\r\nConnection: close\r\n\r\n');
      await writeEach(socket, [HEAD + chunk(event(1))]);
      await waitFor('the first event', () => reads.length === 1); // the interval (1.5 s) is not waited for
      expect(reads).toEqual([event(1)]);
      // nine more, each its own write a few ms apart: within the interval, they wait in the socket's buffer
      await writeEach(socket, [2, 3, 4, 5, 6, 7, 8, 9, 10].map((n) => chunk(event(n))));
      await waitFor('the other nine', () => reads.join('').split('\n').length === 11);
      expect(reads).toHaveLength(2);
      expect(reads[1]).toBe([2, 3, 4, 5, 6, 7, 8, 9, 10].map(event).join(''));
    } finally {
      stream.stop();
    }
  });

  it.each(['TCP', 'TLS'])('reads all that waits at each wake-up: a stream faster than one read per interval is not held to that (%s)', { timeout: 90_000 }, async (over) => {
    ca ??= new TestCA(join(tmp.path, 'pki'));
    const cert = over === 'TLS' ? ca.server('apiserver', ['127.0.0.1']) : undefined;
    server = await rawServer(cert && { cert: cert.certPem, key: cert.keyPem });
    // 1 MiB of 4 KB events in one write, read with an interval of 300 ms. Stopping after the first
    // read of each wake-up held the watch to one read per interval (64 KiB; over TLS ~36 KB):
    // reading on while data waits, a wake-up takes what the kernel holds (its receive buffer).
    const big = (n: number) => `${JSON.stringify({ type: 'MODIFIED', object: { metadata: { name: `n${n}` }, pad: 'x'.repeat(4000) } })}\n`;
    const events = Array.from({ length: 256 }, (_, i) => big(i));
    let received = 0;
    let wakeUps = 0;
    let inTurn = false;
    const onBody = (b: Buffer) => {
      if (!inTurn) {
        wakeUps++;
        inTurn = true;
        setImmediate(() => (inTurn = false));
      }
      received += b.length;
    };
    const stream = streamingGet(
      { url: `${server.url}/api/v1/nodes?watch=1`, headers: {}, tls: { ca: ca.caPem }, idleMs: 60_000, readIntervalMs: 300, maxErrorBodyBytes: 1024 },
      { body: onBody, end: () => {}, status: () => {}, error: () => {} },
    );
    try {
      await waitFor('the request', () => server!.conns.length === 1);
      server.conns[0].socket.write(HEAD + events.map(chunk).join(''));
      const total = events.reduce((a, e) => a + Buffer.byteLength(e), 0);
      const { ms } = await waitFor('all 1 MiB', () => received === total, 60_000).catch((e: Error) => {
        throw new Error(`${e.message}: ${received} of ${total} bytes in ${wakeUps} wake-ups`);
      });
      process.stdout.write(`[streaming-get] 1 MiB over ${over} in ${wakeUps} wake-ups (${Math.round(total / wakeUps / 1024)} KiB each), ${ms} ms (interval 300 ms)\n`);
      expect(total / wakeUps).toBeGreaterThan(80 * 1024); // more than one 64 KiB read per wake-up
    } finally {
      stream.stop();
    }
  });

  it('takes what is not HTTP/1.1 as a broken watch (listed again), and a stream cut inside its body as broken (resumed)', async () => {
    server = await rawServer();
    const client = new KubeClient({ server: server.url, description: 'test' });
    try {
      const garbage = client.watch({ kind: 'Node', path: '/api/v1/nodes', namespaced: false }, '5', () => {}, 60);
      await waitFor('the request', () => server!.conns.length === 1);
      server.conns[0].socket.end('SSH-2.0-OpenSSH_9.2\r\n\r\n');
      const err = await rejected(KubeApiError, garbage.done);
      expect(err.message).toBe(`GET ${server.url}/api/v1/nodes?watch=1&allowWatchBookmarks=true&resourceVersion=5&timeoutSeconds=60: the watch is broken: it sent a status line that is not HTTP/1.1: "SSH-2.0-OpenSSH_9.2"`);
      expect(err.reason).toBe(MALFORMED);

      const events: string[] = [];
      const cut = client.watch<{ metadata: { name: string } }>({ kind: 'Node', path: '/api/v1/nodes', namespaced: false }, '5', (e) => events.push(e.object.metadata.name), 60);
      await waitFor('the request', () => server!.conns.length === 2);
      server.conns[1].socket.end(HEAD + chunk(event(1)) + '40\r\n{"type":');
      const broke = await rejected(KubeApiError, cut.done);
      expect(events).toEqual(['n1']);
      expect(broke.message).toMatch(/resourceVersion=5&timeoutSeconds=60: the watch stream broke \(the connection closed inside the body\)$/);
      expect(broke.reason).toBeUndefined();
    } finally {
      client.close();
    }
  });

  it('hands an error answer\'s body to the status handler, chunked or of a Content-Length', async () => {
    server = await rawServer();
    const body = '{"kind":"Status","reason":"Expired","message":"too old resource version: 5 (100)","code":410}';
    for (const [i, text] of [`HTTP/1.1 410 Gone\r\nContent-Length: ${body.length}\r\n\r\n${body}`, `HTTP/1.1 410 Gone\r\nTransfer-Encoding: chunked\r\n\r\n${chunk(body)}0\r\n\r\n`].entries()) {
      let answer: [number, string] | undefined;
      streamingGet(
        { url: `${server.url}/w`, headers: {}, idleMs: 60_000, readIntervalMs: 20, maxErrorBodyBytes: 1024 },
        { body: () => {}, end: () => {}, status: (code, b) => (answer = [code, b]), error: () => {} },
      );
      await waitFor('the request', () => server!.conns.length === i + 1);
      server.conns[i].socket.write(text); // the connection stays open: the answer is whole without its close
      await waitFor('the answer', () => answer !== undefined);
      expect(answer).toEqual([410, body]);
    }
  });
});
