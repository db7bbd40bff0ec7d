// etcd's v3 API through the JSON gateway every etcd serves beside gRPC on its
// client URL (POST /v3/kv/range, /v3/kv/txn, /v3/lease/grant, /v3/watch ...;
// etcd 3.4+, --enable-grpc-gateway, on by default), over node:http(s). The
// same requests flanneld's clientv3 makes over gRPC, without grpc-js,
// protobufjs and HTTP/2: a daemon on etcd held ~20 MiB more than one on the
// file store with them. Bytes are base64 and 64-bit numbers strings, as the
// gateway marshals them.
//
// What the store needs and no more: range, put, delete, txn, lease grant and
// revoke, a watch that re-attaches itself after a broken stream (from the
// revision after the last it delivered, as clientv3 and etcd3 do) and says
// when etcd cancelled it, endpoints tried in turn, TLS with a client
// certificate, and user/password authentication (a token, fetched again when
// etcd says it expired). Answers are size-capped: whatever answers at the URL
// is not trusted with our memory.
import { EventEmitter } from 'node:events';
import http from 'node:http';
import { httpsModule } from '../../util/tls-on-demand';

/** A key and value as a range read or a watch event gives them. */
export interface Kv {
  key: Buffer;
  value: Buffer;
  mod_revision: string;
  create_revision: string;
  /** "0": attached to no etcd lease. */
  lease: string;
}

export interface EtcdHttpOptions {
  /** http(s)://host:port, tried in turn. */
  endpoints: string[];
  /** Each request's limit (connecting included). */
  timeoutMs: number;
  tls?: { ca?: Buffer; cert?: Buffer; key?: Buffer };
  auth?: { username: string; password: string };
}

/** etcd could not be reached (refused, timed out, down, or said it is unavailable). */
export class EtcdUnreachable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EtcdUnreachable';
  }
}

/** etcd answered with an error (its gRPC status code and message). */
export class EtcdError extends Error {
  constructor(
    message: string,
    readonly code?: number,
  ) {
    super(message);
    this.name = 'EtcdError';
  }
}

/** gRPC's UNAVAILABLE and UNAUTHENTICATED. */
const UNAVAILABLE = 14;
const UNAUTHENTICATED = 16;
const MAX_ANSWER_BYTES = 64 << 20;
const MAX_WATCH_LINE_BYTES = 16 << 20;
/** A broken watch stream is opened again after 250 ms, doubling to 1 s (etcd3's default grew to 30 s). */
const REATTACH_MS = [250, 1000] as const;

const b64 = (s: string | Buffer) => Buffer.from(s).toString('base64');
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A key-value of an answer, checked and decoded. */
function kvOf(v: unknown): Kv {
  if (!isObject(v) || typeof v.key !== 'string') throw new EtcdError('etcd answered a key without its name');
  const str = (x: unknown) => (typeof x === 'string' ? x : '0');
  return {
    key: Buffer.from(v.key, 'base64'),
    value: Buffer.from(typeof v.value === 'string' ? v.value : '', 'base64'),
    mod_revision: str(v.mod_revision),
    create_revision: str(v.create_revision),
    lease: str(v.lease),
  };
}

/** The revision an answer's header carries. */
function revisionOf(v: Record<string, unknown>): string | undefined {
  const h = v.header;
  return isObject(h) && typeof h.revision === 'string' ? h.revision : undefined;
}

/** A compare of a transaction, in the gateway's spelling. */
export interface Compare {
  key: string;
  /** Every key from `key` up to (not including) this one. */
  rangeEnd?: string;
  target: 'CREATE' | 'MOD' | 'VALUE';
  result: 'EQUAL' | 'GREATER' | 'LESS' | 'NOT_EQUAL';
  createRevision?: string;
  modRevision?: string;
  value?: string;
}

export class EtcdHttp {
  private readonly agent: http.Agent;
  /** The endpoint that answered last: the next request starts there. */
  private current = 0;
  private token?: string;

  constructor(private readonly o: EtcdHttpOptions) {
    const secure = o.endpoints.some((e) => e.startsWith('https:'));
    this.agent = secure ? new (httpsModule().Agent)({ keepAlive: true, ca: o.tls?.ca ?? systemRoots(), cert: o.tls?.cert, key: o.tls?.key }) : new http.Agent({ keepAlive: true });
  }

  /** The endpoints, for messages. */
  get description(): string {
    return this.o.endpoints.join(',');
  }

  /** One POST of `body` to `path` (JSON), on the endpoints in turn; the answer's JSON object. */
  async call(path: string, body: unknown): Promise<Record<string, unknown>> {
    if (this.o.auth && !this.token) await this.authenticate();
    try {
      return await this.onEndpoints((url) => this.post(url, path, body));
    } catch (err) {
      // a token etcd no longer knows (expired, or etcd restarted): one more try with a new one
      if (!(err instanceof EtcdError) || err.code !== UNAUTHENTICATED || !this.o.auth) throw err;
      await this.authenticate();
      return this.onEndpoints((url) => this.post(url, path, body));
    }
  }

  private async authenticate(): Promise<void> {
    this.token = undefined;
    const { username, password } = this.o.auth!;
    const res = await this.onEndpoints((url) => this.post(url, '/v3/auth/authenticate', { name: username, password }));
    if (typeof res.token !== 'string') throw new EtcdError(`etcd ${this.description} authenticated ${JSON.stringify(username)} without a token`);
    this.token = res.token;
  }

  /** `fn` on each endpoint from the current one until one answers (an EtcdError is an answer). */
  private async onEndpoints<T>(fn: (endpoint: string) => Promise<T>): Promise<T> {
    const n = this.o.endpoints.length;
    let last: Error | undefined;
    for (let k = 0; k < n; k++) {
      const i = (this.current + k) % n;
      try {
        const r = await fn(this.o.endpoints[i]);
        this.current = i;
        return r;
      } catch (err) {
        if (!(err instanceof EtcdUnreachable)) throw err;
        last = err;
      }
    }
    throw last ?? new EtcdUnreachable(`etcd ${this.description}: no endpoint`);
  }

  private post(endpoint: string, path: string, body: unknown): Promise<Record<string, unknown>> {
    return new Promise((resolve, reject) => {
      const req = this.request(endpoint, path, (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > MAX_ANSWER_BYTES) {
            req.destroy();
            reject(new EtcdError(`etcd ${endpoint}: an answer over ${MAX_ANSWER_BYTES >> 20} MiB`));
          } else chunks.push(c);
        });
        res.on('error', (err) => reject(new EtcdUnreachable(`etcd ${endpoint} unreachable: ${err.message}`)));
        res.on('end', () => {
          try {
            resolve(answer(endpoint, res.statusCode ?? 0, Buffer.concat(chunks).toString('utf8')));
          } catch (err) {
            reject(err);
          }
        });
      });
      req.on('error', (err) => reject(new EtcdUnreachable(`etcd ${endpoint} unreachable: ${err.message}`)));
      req.end(JSON.stringify(body));
    });
  }

  /** A POST; `timeoutMs` 0: none (a watch stream is quiet for as long as nothing changes). */
  private request(endpoint: string, path: string, onResponse: (res: http.IncomingMessage) => void, timeoutMs = this.o.timeoutMs): http.ClientRequest {
    const url = new URL(path, endpoint);
    const lib = url.protocol === 'https:' ? httpsModule() : http;
    const req = lib.request(url, {
      method: 'POST',
      agent: this.agent,
      headers: { 'content-type': 'application/json', ...(this.token ? { authorization: this.token } : {}) },
      ...(timeoutMs > 0 ? { timeout: timeoutMs } : {}),
    }, onResponse);
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs / 1000} s`)));
    return req;
  }

  /** The keys from `key` to `rangeEnd` (only `key` without it), and the revision they were read at. */
  async range(key: string, rangeEnd?: string): Promise<{ revision: string; kvs: Kv[] }> {
    const res = await this.call('/v3/kv/range', { key: b64(key), ...(rangeEnd !== undefined ? { range_end: b64(rangeEnd) } : {}) });
    const kvs = res.kvs === undefined ? [] : Array.isArray(res.kvs) ? res.kvs.map(kvOf) : undefined;
    const revision = revisionOf(res);
    if (!kvs || revision === undefined) throw new EtcdError(`etcd ${this.description} answered a range read without its keys or revision`);
    return { revision, kvs };
  }

  async put(key: string, value: string, lease?: string): Promise<string | undefined> {
    return revisionOf(await this.call('/v3/kv/put', { key: b64(key), value: b64(value), ...(lease ? { lease } : {}) }));
  }

  async delete(key: string): Promise<string | undefined> {
    return revisionOf(await this.call('/v3/kv/deleterange', { key: b64(key) }));
  }

  /** If every compare holds, the puts: whether it did, and the revision. */
  async txn(compare: readonly Compare[], puts: readonly { key: string; value: string; lease?: string }[]): Promise<{ succeeded: boolean; revision?: string }> {
    const res = await this.call('/v3/kv/txn', {
      compare: compare.map((c) => ({
        key: b64(c.key),
        ...(c.rangeEnd !== undefined ? { range_end: b64(c.rangeEnd) } : {}),
        target: c.target,
        result: c.result,
        ...(c.createRevision !== undefined ? { create_revision: c.createRevision } : {}),
        ...(c.modRevision !== undefined ? { mod_revision: c.modRevision } : {}),
        ...(c.value !== undefined ? { value: b64(c.value) } : {}),
      })),
      success: puts.map((p) => ({ request_put: { key: b64(p.key), value: b64(p.value), ...(p.lease ? { lease: p.lease } : {}) } })),
    });
    return { succeeded: res.succeeded === true, revision: revisionOf(res) };
  }

  async leaseGrant(ttlS: number): Promise<string> {
    const res = await this.call('/v3/lease/grant', { TTL: String(ttlS) });
    if (typeof res.ID !== 'string') throw new EtcdError(`etcd ${this.description} granted a lease without its ID${typeof res.error === 'string' ? `: ${res.error}` : ''}`);
    return res.ID;
  }

  async leaseRevoke(id: string): Promise<void> {
    await this.call('/v3/lease/revoke', { ID: id });
  }

  /**
   * Watches the keys from `key` to `rangeEnd` from `startRevision` (or now);
   * resolves once etcd created the watch (rejects when it would not, e.g. the
   * revision was compacted). See EtcdWatch for its events.
   */
  async watch(key: string, rangeEnd: string, startRevision?: string): Promise<EtcdWatch> {
    if (this.o.auth && !this.token) await this.authenticate();
    const w = new EtcdWatch(this, key, rangeEnd);
    await w.open(startRevision);
    return w;
  }

  /** A watch stream's request: answers handed over line by line (the watch's own, no time limit). */
  stream(path: string, body: unknown, onLine: (line: string) => void, onEnd: (err: Error) => void): () => void {
    let ended = false;
    const end = (err: Error) => {
      if (ended) return;
      ended = true;
      onEnd(err);
    };
    const endpoint = this.o.endpoints[this.current];
    const req = this.request(endpoint, path, (res) => {
      if (res.statusCode !== 200) {
        let text = '';
        res.on('data', (c: Buffer) => (text.length < 4096 ? (text += c.toString('utf8')) : undefined));
        res.on('end', () => {
          try {
            answer(endpoint, res.statusCode ?? 0, text);
            end(new EtcdError(`etcd ${endpoint}: watch answered ${res.statusCode}`));
          } catch (err) {
            end(err as Error);
          }
        });
        return;
      }
      let partial: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        let start = 0;
        for (let nl = c.indexOf(10); nl >= 0 && !ended; nl = c.indexOf(10, start)) {
          partial.push(c.subarray(start, nl));
          const line = Buffer.concat(partial).toString('utf8');
          partial = [];
          size = 0;
          start = nl + 1;
          if (line.trim()) onLine(line);
        }
        if (start < c.length) {
          partial.push(c.subarray(start));
          size += c.length - start;
          if (size > MAX_WATCH_LINE_BYTES) {
            req.destroy();
            end(new EtcdError(`etcd ${endpoint}: a watch answer over ${MAX_WATCH_LINE_BYTES >> 20} MiB`));
          }
        }
      });
      res.on('error', (err) => end(new EtcdUnreachable(`etcd ${endpoint} unreachable: ${err.message}`)));
      res.on('end', () => end(new EtcdUnreachable(`etcd ${endpoint} ended the watch stream`)));
    }, 0);
    req.on('socket', (s) => s.setKeepAlive(true, 10_000));
    req.on('error', (err) => end(new EtcdUnreachable(`etcd ${endpoint} unreachable: ${err.message}`)));
    req.end(JSON.stringify(body));
    return () => {
      ended = true;
      req.destroy();
    };
  }

  close(): void {
    this.agent.destroy();
  }
}

/** Where the system's CA bundle is, as Go (flanneld) looks for it: SSL_CERT_FILE, else the distributions' files. */
const CA_FILES = ['/etc/ssl/certs/ca-certificates.crt', '/etc/pki/tls/certs/ca-bundle.crt', '/etc/ssl/ca-bundle.pem', '/etc/ssl/cert.pem'];

/**
 * Without --etcd-cafile, etcd's certificate is checked as flanneld checks it:
 * against the system's CAs (SSL_CERT_FILE moves them), with Node's own bundle
 * beside them. Node 22.15+ reads the system's store itself; before, its file.
 */
function systemRoots(): string[] | undefined {
  // the module itself, not the build's copy of its properties (made on the build machine's Node, which may lack it)
  const tlsModule = require('node:tls') as { rootCertificates: readonly string[]; getCACertificates?: (type: string) => string[] };
  if (tlsModule.getCACertificates) return [...tlsModule.getCACertificates('bundled'), ...tlsModule.getCACertificates('system')];
  const fs = require('node:fs') as typeof import('node:fs');
  for (const file of [process.env.SSL_CERT_FILE, ...CA_FILES]) {
    if (!file) continue;
    try {
      return [...tlsModule.rootCertificates, fs.readFileSync(file, 'utf8')];
    } catch {
      // not there: the next
    }
  }
  return undefined;
}

/** An answer's JSON object, or the error etcd (or whatever answers there) said. */
function answer(endpoint: string, status: number, text: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    v = undefined;
  }
  if (status === 200 && isObject(v) && !('error' in v && 'code' in v)) return v;
  if (isObject(v) && typeof v.message === 'string') {
    const code = typeof v.code === 'number' ? v.code : undefined;
    if (code === UNAVAILABLE) throw new EtcdUnreachable(`etcd ${endpoint} unreachable: ${v.message}`);
    throw new EtcdError(`etcd ${endpoint}: ${v.message}`, code);
  }
  // a 404 without etcd's error object: another server, or no gateway
  const what = status === 404 ? ': it does not answer etcd v3\'s API (not etcd, not its client URL, or an etcd with --enable-grpc-gateway=false?)' : '';
  throw new EtcdError(`etcd ${endpoint}: HTTP ${status}${what}`);
}

/**
 * A watch of a key range, kept attached: after a broken stream it is opened
 * again from the revision after the last one delivered ('disconnected' then
 * 'connected'), as etcd3's watcher does. Events: 'put' and 'delete' (a Kv),
 * 'connected' (attached again), 'disconnected' (an Error), 'error' (etcd
 * cancelled it, e.g. the revision to resume from was compacted: it is not
 * opened again).
 */
export class EtcdWatch extends EventEmitter {
  /** The revision after which every change was delivered. */
  private seen?: bigint;
  private stop?: () => void;
  private timer?: NodeJS.Timeout;
  private cancelled = false;
  private delay: number = REATTACH_MS[0];
  /** Events to emit, in order, once the code that awaited the watch has its listeners on. */
  private queue: [string, unknown?][] = [];

  constructor(
    private readonly client: EtcdHttp,
    private readonly key: string,
    private readonly rangeEnd: string,
  ) {
    super();
  }

  /** Opens the stream; resolves once etcd has created the watch. */
  open(startRevision?: string): Promise<void> {
    return new Promise((resolve, reject) => {
      let created = false;
      const request = { create_request: { key: b64(this.key), range_end: b64(this.rangeEnd), ...(startRevision !== undefined ? { start_revision: startRevision } : {}) } };
      this.stop = this.client.stream('/v3/watch', request, (line) => {
        let result: unknown;
        try {
          const msg = JSON.parse(line) as unknown;
          result = isObject(msg) ? (msg.result ?? (isObject(msg.error) ? msg.error : undefined)) : undefined;
          if (!isObject(result)) throw new Error(`an answer that is not a watch response: ${line.slice(0, 200)}`);
        } catch (err) {
          return this.broken(new EtcdError(`etcd ${this.client.description}: ${(err as Error).message}`), created, reject);
        }
        if (result.canceled === true || (!created && result.created !== true && typeof result.message === 'string')) {
          const why = typeof result.cancel_reason === 'string' ? result.cancel_reason : typeof result.message === 'string' ? result.message : 'cancelled';
          const compacted = typeof result.compact_revision === 'string' && result.compact_revision !== '0' ? ` (compacted at revision ${result.compact_revision})` : '';
          const err = new EtcdError(`watch cancelled: ${why}${compacted}`);
          this.stop?.();
          if (!created) return reject(err);
          this.cancelled = true;
          return this.later('error', err);
        }
        if (!created && result.created === true) {
          created = true;
          this.delay = REATTACH_MS[0];
          const rev = revisionOf(result);
          // created at revision R from now: every change after R is delivered; from a start revision S: after S - 1
          if (this.seen === undefined) this.seen = startRevision !== undefined ? BigInt(startRevision) - 1n : rev !== undefined ? BigInt(rev) : undefined;
          resolve();
        }
        for (const e of Array.isArray(result.events) ? result.events : []) {
          if (!isObject(e)) continue;
          let kv: Kv;
          try {
            kv = kvOf(e.kv);
          } catch {
            continue;
          }
          const rev = BigInt(/^\d+$/.test(kv.mod_revision) ? kv.mod_revision : '0');
          if (this.seen === undefined || rev > this.seen) this.seen = rev;
          this.later(e.type === 'DELETE' ? 'delete' : 'put', kv);
        }
      }, (err) => this.broken(err, created, reject));
    });
  }

  /**
   * Emits after the current turn: the answer that created the watch may carry
   * events (or its cancellation) too, and the code awaiting it adds its
   * listeners only once the promise has resolved.
   */
  private later(event: string, arg?: unknown): void {
    if (this.queue.push([event, arg]) > 1) return;
    setImmediate(() => {
      const q = this.queue;
      this.queue = [];
      for (const [e, a] of q) {
        if (this.listenerCount(e) === 0 && e === 'error') continue; // cancelled meanwhile: nobody to tell
        this.emit(e, a);
      }
    });
  }

  /** The stream ended: before the watch was created, that is a failure to create it; after, it is opened again. */
  private broken(err: Error, created: boolean, reject: (err: Error) => void): void {
    this.stop?.();
    if (!created) return reject(err);
    if (this.cancelled) return;
    this.later('disconnected', err);
    this.timer = setTimeout(() => {
      const from = this.seen !== undefined ? String(this.seen + 1n) : undefined;
      this.open(from).then(
        () => this.later('connected'),
        (e: Error) => {
          if (e instanceof EtcdUnreachable) this.broken(e, true, () => {});
          else {
            this.cancelled = true;
            this.later('error', e);
          }
        },
      );
    }, this.delay);
    this.timer.unref?.();
    this.delay = Math.min(this.delay * 2, REATTACH_MS[1]);
  }

  /** Ends the watch (no event after). */
  async cancel(): Promise<void> {
    this.cancelled = true;
    clearTimeout(this.timer);
    this.stop?.();
    this.removeAllListeners();
  }
}
