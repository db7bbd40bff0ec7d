// A GET whose answer is read straight from its own connection (TCP, or TLS
// over it), for an answer that never ends: a watch. Two things node:http
// does not do for us:
// - the body is handed over a read at a time (over TLS, a record at a time),
//   not through a stream's machinery chunk by chunk (http1-response.ts says
//   why that matters);
// - while the body keeps coming, the socket is read at most once per
//   `readIntervalMs`: what arrives meanwhile waits in the kernel's socket
//   buffer and comes at the next wake-up, which reads all that waits: one
//   wake-up for many events, and no cap on how fast a watch can be read. A
//   connection that was quiet for that long is read at once, so a lone event
//   is never held back; only one that follows another within the interval is,
//   and by less than the interval.
import net from 'node:net';
import type tls from 'node:tls';
import { tlsModule } from '../../util/tls-on-demand';
import { ResponseDecoder } from './http1-response';

export interface StreamingGetOptions {
  /** The whole URL (http: or https:). */
  url: string;
  /** Request headers besides Host and Connection. */
  headers: Record<string, string>;
  /** For https: the CA, client certificate, server name and whether to check the server at all. */
  tls?: Pick<tls.ConnectionOptions, 'ca' | 'cert' | 'key' | 'rejectUnauthorized' | 'servername'>;
  /** Nothing received (connecting included) for this long: the connection is taken as dead. */
  idleMs: number;
  /** While data keeps coming, at most one read per this long (0: every read at once). */
  readIntervalMs: number;
  /** The most an error answer's body may be (past it, only its beginning is kept). */
  maxErrorBodyBytes: number;
}

/** Where the GET failed: before an answer came, after the body began, silent, or not HTTP/1.1 at all. */
export type StreamFailure = 'connect' | 'broken' | 'idle' | 'protocol';

export interface StreamingGetHandlers {
  /** Some of a 200 answer's body: a view into a buffer that the next read reuses, valid during the call only. */
  body(bytes: Buffer): void;
  /** A 200 answer's body is over (the server ended it). */
  end(): void;
  /** Another status, with (the beginning of) its body. */
  status(code: number, body: string): void;
  /** The connection failed. */
  error(err: Error, where: StreamFailure): void;
}

/** One read's most (a Node is a few KB: a read holds many events). */
const READ_BUFFER_BYTES = 64 * 1024;

/** Characters a header value may not hold (a token read from a file is not trusted to be one line). */
const NOT_A_HEADER_VALUE = /[^\t\x20-\x7e]/;

/**
 * Sends the GET and calls the handlers until exactly one of end, status or
 * error has been called, or stop(): then nothing more is called and the
 * connection is closed.
 */
export function streamingGet(opts: StreamingGetOptions, on: StreamingGetHandlers): { stop(): void } {
  const url = new URL(opts.url);
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1'); // an IPv6 address without its brackets
  const port = Number(url.port) || (url.protocol === 'https:' ? 443 : 80);
  let over = false;
  let readTimer: NodeJS.Timeout | undefined;
  const finish = () => {
    over = true;
    clearTimeout(readTimer);
    socket.destroy();
  };

  for (const [name, value] of Object.entries(opts.headers)) {
    if (NOT_A_HEADER_VALUE.test(value)) {
      queueMicrotask(() => on.error(new Error(`the ${name} header would hold a character a header cannot carry`), 'connect'));
      return { stop: () => {} };
    }
  }
  const request = [`GET ${url.pathname}${url.search} HTTP/1.1`, `Host: ${url.host}`, ...Object.entries(opts.headers).map(([k, v]) => `${k}: ${v}`), 'Connection: close', '', ''].join('\r\n');

  // Read into one buffer of our own (onread): each read is handed over as it is, and
  // socket.pause() stops reading from the kernel until resume(). (A socket without
  // onread, paused, would go on reading into its own buffer and hand the reads over
  // one by one.)
  const onread = { buffer: Buffer.allocUnsafe(READ_BUFFER_BYTES), callback: (n: number, buffer: Buffer) => onRead(buffer.subarray(0, n)) };
  const socket: net.Socket =
    url.protocol === 'https:'
      ? tlsModule().connect({ host, port, ...opts.tls, servername: opts.tls?.servername ?? (net.isIP(host) ? undefined : host), onread } as tls.ConnectionOptions) // onread: in tls.connect's docs, not its types
      : net.connect({ host, port, onread });
  socket.setTimeout(opts.idleMs, () => {
    if (over) return;
    finish();
    on.error(new Error(`nothing received for ${opts.idleMs / 1000} s`), 'idle');
  });
  socket.once(url.protocol === 'https:' ? 'secureConnect' : 'connect', () => socket.write(request));

  let answered = false;
  let errorBody: { status: number; parts: Buffer[]; bytes: number } | undefined;
  const decoder = new ResponseDecoder({
    head: ({ status }) => {
      answered = true;
      if (status !== 200) errorBody = { status, parts: [], bytes: 0 };
    },
    body: (bytes) => {
      if (over) return;
      if (!errorBody) return on.body(bytes);
      const room = opts.maxErrorBodyBytes - errorBody.bytes;
      if (room > 0) errorBody.parts.push(Buffer.from(bytes.subarray(0, room)));
      errorBody.bytes += Math.min(room, bytes.length);
      if (errorBody.bytes >= opts.maxErrorBodyBytes) answerStatus(); // the beginning says enough
    },
    end: () => {
      if (over) return;
      if (errorBody) return answerStatus();
      finish();
      on.end();
    },
  });
  const answerStatus = () => {
    finish();
    on.status(errorBody!.status, Buffer.concat(errorBody!.parts).toString());
  };

  let stopping = false;
  /** One read; false: read no more (the answer is over or broken). */
  const onRead = (bytes: Buffer): boolean => {
    if (over) return false;
    try {
      decoder.push(bytes);
    } catch (err) {
      if (over) return false;
      finish();
      on.error(err as Error, 'protocol');
      return false;
    }
    if (over || opts.readIntervalMs <= 0 || stopping || readTimer) return !over;
    // A wake-up reads what waits, all of it: libuv reads on while the socket has data (over TLS,
    // record by record) within this turn of the event loop. Then no reads until the interval is
    // over: what comes meanwhile waits in the kernel's buffer and is read then in one go. (Stopping
    // after the first read of a wake-up instead capped a watch at one read per interval: at 20 ms,
    // 64 KiB, ~3.2 MB/s over TCP, and ~1.8 MB/s over TLS, about what 5,000 kubelets' heartbeats send.)
    stopping = true;
    setImmediate(() => {
      stopping = false;
      if (over) return;
      socket.pause();
      readTimer = setTimeout(() => {
        readTimer = undefined;
        if (!over) socket.resume();
      }, opts.readIntervalMs);
    });
    return true;
  };
  socket.on('error', (err) => {
    if (over) return;
    finish();
    on.error(err, answered ? 'broken' : 'connect');
  });
  socket.on('close', () => {
    if (over) return;
    try {
      decoder.finish(); // a body that runs to the close ends here; calls end()
      if (over) return;
    } catch (err) {
      finish();
      return on.error(err as Error, answered ? 'broken' : 'connect');
    }
  });
  return { stop: () => (over ? undefined : finish()) };
}
