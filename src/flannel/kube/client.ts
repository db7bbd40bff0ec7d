// A small Kubernetes API client for what the daemon does: list and watch a
// collection (Nodes for the kube subnet manager; Pods, Namespaces and
// NetworkPolicies for --network-policy), get a Node or a Pod, and patch our
// Node (its annotations and its NetworkUnavailable condition, through the
// status subresource as flanneld does: kube-flannel's ClusterRole grants
// `patch` on nodes/status only).
// HTTP/1.1 over node:https with one keep-alive agent, JSON only; a watch on
// its own connection, read in batches (streaming-get.ts).
//
// Why our own client and not @kubernetes/client-node: see the README's
// dependency table (measured: bundle size, load time and memory for load +
// list + watch).
import http from 'node:http';
import type { KubeConnection } from './config';
import type { KubeNode, NodeList } from './node';
import { NODES, type KubeObject, type ObjectList, type Resource, type WatchEvent } from './resource';
import { streamingGet, type StreamingGetOptions } from './streaming-get';
import { CheckedEvent, LineSplitter, isObject, mib, parseWatchEvent } from './watch-stream';
import { httpsModule } from '../../util/tls-on-demand';

/** A request that failed: the message names the method, the URL and the HTTP status (or the network error). */
export class KubeApiError extends Error {
  override name = 'KubeApiError';
  constructor(
    message: string,
    /** The HTTP status (a watch's ERROR event: its Status code); undefined when no answer came. */
    readonly status?: number,
    /** The Status object's reason: NotFound, Conflict, Expired, Forbidden, ... */
    readonly reason?: string,
  ) {
    super(message);
  }
}

/**
 * The reason of a KubeApiError for an answer that is not what the API
 * promises (a watch event of the wrong shape, a list whose items are not
 * objects): whoever watched cannot tell what was missed, and lists again.
 */
export const MALFORMED = 'Malformed';

/** The most an answer other than a watch may be (a page of 500 Nodes is a few MB). */
export const MAX_BODY_BYTES = 64 * 2 ** 20;
/** The most one watch event may be (a Node is a few KB; an object is at most ~1.5 MB in etcd). */
export const MAX_WATCH_LINE_BYTES = 4 * 2 ** 20;

/**
 * While a watch's events keep coming, the longest one waits in the socket's
 * buffer to be read with those after it (a lone event is read at once).
 * Each wake-up costs ~0.3 ms here whatever it reads (timers, the socket's
 * machinery, caches gone cold in between): 5,000 kubelets' heartbeats read
 * 50 ms at a time cost ~3.5% of a core, 20 ms at a time ~5.5%, read as they
 * come more still (docs/speed.md, "Watches read in batches", "Fewer wake-ups").
 */
export const WATCH_READ_INTERVAL_MS = 50;

export interface WatchHandle {
  /**
   * Settles when the stream is over: resolves when the server ended it (its
   * timeoutSeconds) or stop() was called; rejects with a KubeApiError when it
   * could not be opened, broke, went silent for too long, or the server sent
   * an ERROR event (status 410: the resourceVersion is too old, list again).
   */
  done: Promise<void>;
  stop(): void;
}

export interface KubeClientOptions {
  /** The most a request other than a watch may take (default 10 s). */
  timeoutMs?: number;
  /**
   * A watch that brings nothing (event or bookmark) for this long is taken as
   * broken (default 90 s: kube-apiserver sends a bookmark about every minute).
   * A peer that vanished without closing the connection is noticed this way.
   */
  watchIdleMs?: number;
  userAgent?: string;
  /** The most an answer may be: past it the request is aborted (default MAX_BODY_BYTES). */
  maxBodyBytes?: number;
  /** The most one watch event may be: past it the watch is taken as broken (default MAX_WATCH_LINE_BYTES). */
  maxWatchLineBytes?: number;
  /** While a watch's events keep coming, its connection is read at most once per this long (default WATCH_READ_INTERVAL_MS). */
  watchReadIntervalMs?: number;
}

type PatchType = 'strategic' | 'merge';
const PATCH_CONTENT_TYPE: Record<PatchType, string> = {
  strategic: 'application/strategic-merge-patch+json',
  merge: 'application/merge-patch+json',
};

/** Nodes per list page (client-go's pager and kubectl use 500). */
export const LIST_PAGE_SIZE = 500;

/** Node's codes for a server certificate it refused. */
const TLS_TRUST_ERROR = /^(UNABLE_TO_|SELF_SIGNED_CERT|DEPTH_ZERO_SELF_SIGNED|CERT_|ERR_TLS_CERT_ALTNAME_INVALID)/;

export class KubeClient {
  private readonly agent: http.Agent;
  private readonly timeoutMs: number;
  private readonly watchIdleMs: number;
  private readonly userAgent: string;
  private readonly maxBodyBytes: number;
  private readonly maxWatchLineBytes: number;
  private readonly watchReadIntervalMs: number;
  private readonly tls: StreamingGetOptions['tls'];

  constructor(
    private readonly conn: KubeConnection,
    opts: KubeClientOptions = {},
  ) {
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.watchIdleMs = opts.watchIdleMs ?? 90_000;
    this.userAgent = opts.userAgent ?? 'vxlan-flannel';
    this.maxBodyBytes = opts.maxBodyBytes ?? MAX_BODY_BYTES;
    this.maxWatchLineBytes = opts.maxWatchLineBytes ?? MAX_WATCH_LINE_BYTES;
    this.watchReadIntervalMs = opts.watchReadIntervalMs ?? WATCH_READ_INTERVAL_MS;
    this.tls = { ca: conn.ca, cert: conn.cert, key: conn.key, rejectUnauthorized: !conn.insecureSkipTLSVerify, servername: conn.tlsServerName };
    this.agent = conn.server.startsWith('https:') ? new (httpsModule().Agent)({ keepAlive: true, ...this.tls }) : new http.Agent({ keepAlive: true });
  }

  /** The API's base URL. */
  get server(): string {
    return this.conn.server;
  }

  /** The node a pod runs on (its spec.nodeName; undefined while it is not scheduled). */
  async podNodeName(namespace: string, name: string): Promise<string | undefined> {
    const pod = await this.call<{ spec?: { nodeName?: string } }>('GET', `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(name)}`);
    return pod.spec?.nodeName || undefined;
  }

  getNode(name: string): Promise<KubeNode> {
    return this.call<KubeNode>('GET', `/api/v1/nodes/${encodeURIComponent(name)}`);
  }

  /**
   * One page of a collection, as client-go's pager reads it: at most `limit`
   * (the first page: read consistently, the most recent state), or the
   * page after `token` (the last page's `continue`; every page is the list
   * at the first page's resourceVersion). `continue` is set while more
   * remain. A token the server no longer serves is a KubeApiError 410
   * (Expired): list again from the first page.
   */
  async listPage<T extends KubeObject>(r: Resource, limit: number, token?: string): Promise<ObjectList<T>> {
    const query = new URLSearchParams({ limit: String(limit), ...(token ? { continue: token } : {}) });
    const path = `${r.path}?${query}`;
    const list = await this.call<unknown>('GET', path);
    const malformed = (what: string) => new KubeApiError(`GET ${this.conn.server}${path}: ${what}`, 200, MALFORMED);
    if (!isObject(list)) throw malformed('the list is not a JSON object');
    const items = list.items ?? [];
    if (!Array.isArray(items) || !items.every(isObject)) throw malformed('the list\'s items are not JSON objects');
    const meta = isObject(list.metadata) ? list.metadata : {};
    const rv = typeof meta.resourceVersion === 'string' ? meta.resourceVersion : '';
    const next = typeof meta.continue === 'string' ? meta.continue : undefined;
    return { items: items as unknown as T[], resourceVersion: rv, ...(next ? { continue: next } : {}) };
  }

  /**
   * A whole collection, read consistently, with the list's resourceVersion:
   * in pages of `limit`, so that no answer holds thousands of objects at
   * once; listed again from the start when a continue token expired (a few
   * times at most).
   */
  async list<T extends KubeObject>(r: Resource, limit = LIST_PAGE_SIZE): Promise<ObjectList<T>> {
    const items: T[] = [];
    const rv = await this.eachPage<T>(r, limit, (page) => items.push(...page.items), () => (items.length = 0));
    return { items, resourceVersion: rv };
  }

  /** Every Node (list()). */
  listNodes(limit = LIST_PAGE_SIZE): Promise<NodeList> {
    return this.list<KubeNode>(NODES, limit);
  }

  /**
   * Reads a collection page by page, handing each to `onPage` (the next one
   * is on its way meanwhile); when a continue token expired (410), calls
   * `onRestart(why)` and starts again from the first page (client-go lists
   * again too), at most `restarts` times. Resolves with the list's
   * resourceVersion.
   */
  async eachPage<T extends KubeObject>(r: Resource, limit: number, onPage: (page: ObjectList<T>) => void, onRestart: (why: string) => void, restarts = 3): Promise<string> {
    // the next page is asked for before this one is handed over: the server works while we do
    const ask = (token?: string) => {
      const p = this.listPage<T>(r, limit, token);
      p.catch(() => {}); // awaited below; not unhandled meanwhile
      return { token, page: p };
    };
    let next = ask();
    for (;;) {
      let page: ObjectList<T>;
      try {
        page = await next.page;
      } catch (err) {
        if (!next.token || !(err instanceof KubeApiError) || err.status !== 410 || restarts-- <= 0) throw err;
        onRestart(err.message);
        next = ask();
        continue;
      }
      if (page.continue) next = ask(page.continue);
      onPage(page);
      if (!page.continue) return page.resourceVersion;
    }
  }

  /**
   * Patches Node `name` (`status`: through /status, which changes metadata
   * and status, never the spec). A strategic merge patch by default: a map
   * merges key by key, `null` removes a key, and the conditions list merges
   * by condition type.
   */
  patchNode(name: string, patch: object, opts: { status?: boolean; type?: PatchType } = {}): Promise<KubeNode> {
    const path = `/api/v1/nodes/${encodeURIComponent(name)}${opts.status ? '/status' : ''}`;
    return this.call<KubeNode>('PATCH', path, { text: JSON.stringify(patch), type: PATCH_CONTENT_TYPE[opts.type ?? 'strategic'] });
  }

  /** Watches Nodes (watch()). */
  watchNodes(resourceVersion: string, onEvent: (e: WatchEvent<KubeNode>) => void, timeoutSeconds: number): WatchHandle {
    return this.watch<KubeNode>(NODES, resourceVersion, onEvent, timeoutSeconds);
  }

  /**
   * Watches a collection from `resourceVersion` (every change after it, then
   * live), with bookmarks; the server ends the stream after `timeoutSeconds`.
   */
  watch<T extends KubeObject>(r: Resource, resourceVersion: string, onEvent: (e: WatchEvent<T>) => void, timeoutSeconds: number): WatchHandle {
    const query = new URLSearchParams({ watch: '1', allowWatchBookmarks: 'true', resourceVersion, timeoutSeconds: String(timeoutSeconds) });
    const url = this.conn.server + `${r.path}?${query}`;
    let stop = () => {};
    const done = new Promise<void>((resolve, reject) => {
      let over = false;
      const settle = (err?: Error) => {
        if (over) return;
        over = true;
        stream.stop();
        if (err) reject(err);
        else resolve();
      };
      const lines = new LineSplitter(this.maxWatchLineBytes);
      const stream = streamingGet(
        { url, headers: this.headers(), tls: this.tls, idleMs: this.watchIdleMs, readIntervalMs: this.watchReadIntervalMs, maxErrorBodyBytes: this.maxBodyBytes },
        {
          body: (bytes) => {
            let event: CheckedEvent | undefined;
            try {
              for (const line of lines.push(bytes)) {
                if (over) return; // the rest of a read after a failure is not read
                event = undefined;
                if (!line.trim()) continue;
                event = parseWatchEvent(line);
                if (event.type === 'ERROR') {
                  const s = event.object as { code?: unknown; reason?: unknown; message?: unknown };
                  const code = typeof s.code === 'number' ? s.code : undefined;
                  const reason = typeof s.reason === 'string' ? s.reason : undefined;
                  const message = typeof s.message === 'string' ? s.message : JSON.stringify(s);
                  return settle(new KubeApiError(`GET ${url}: watch ERROR ${code ?? '?'} ${reason ?? ''}: ${message.slice(0, 500)}`, code, reason));
                }
                onEvent(event as unknown as WatchEvent<T>);
              }
            } catch (err) {
              const what = event ? `its ${event.type} event could not be read (${(err as Error).message})` : `it sent ${(err as Error).message}`;
              settle(new KubeApiError(`GET ${url}: the watch is broken: ${what}`, undefined, MALFORMED));
            }
          },
          end: () => settle(lines.pending ? new KubeApiError(`GET ${url}: the watch stream ended inside an event`) : undefined),
          status: (code, body) => settle(this.statusError('GET', url, code, body)),
          error: (err, where) => {
            if (where === 'idle') return settle(new KubeApiError(`GET ${url}: no event or bookmark for ${this.watchIdleMs / 1000} s`));
            if (where === 'protocol') return settle(new KubeApiError(`GET ${url}: the watch is broken: it sent ${err.message}`, undefined, MALFORMED));
            if (where === 'broken') return settle(new KubeApiError(`GET ${url}: the watch stream broke (${err.message})`));
            settle(this.networkError('GET', url, err));
          },
        },
      );
      stop = () => settle();
    });
    return { done, stop: () => stop() };
  }

  /** Closes idle keep-alive connections (open watches are stopped by their own handle). */
  close(): void {
    this.agent.destroy();
  }

  private open(method: string, path: string, body?: { text: string; type: string }): { req: http.ClientRequest; url: string } {
    const url = this.conn.server + path;
    const headers = this.headers();
    if (body) Object.assign(headers, { 'Content-Type': body.type, 'Content-Length': String(Buffer.byteLength(body.text)) });
    const request = url.startsWith('https:') ? httpsModule().request : http.request;
    return { req: request(url, { method, headers, agent: this.agent }), url };
  }

  /** Every request's headers: what we accept, who we are, the token (read now: it rotates). */
  private headers(): Record<string, string> {
    const headers: Record<string, string> = { Accept: 'application/json', 'User-Agent': this.userAgent };
    const token = this.conn.token?.();
    if (token) headers.Authorization = `Bearer ${token}`;
    return headers;
  }

  private call<T>(method: string, path: string, body?: { text: string; type: string }): Promise<T> {
    const { req, url } = this.open(method, path, body);
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => req.destroy(new KubeApiError(`${method} ${url}: no answer within ${this.timeoutMs / 1000} s`)), this.timeoutMs);
      req.on('error', (err) => {
        clearTimeout(timer);
        reject(err instanceof KubeApiError ? err : this.networkError(method, url, err));
      });
      req.on('response', (res) => {
        readBody(res, this.maxBodyBytes).then(
          (text) => {
            clearTimeout(timer);
            const status = res.statusCode ?? 0;
            if (status < 200 || status > 299) return reject(this.statusError(method, url, status, text));
            try {
              resolve(JSON.parse(text) as T);
            } catch {
              reject(new KubeApiError(`${method} ${url}: ${status} but the answer is not JSON: ${JSON.stringify(text.slice(0, 200))}`, status));
            }
          },
          (err: Error) => {
            clearTimeout(timer);
            reject(this.networkError(method, url, err));
          },
        );
      });
      req.end(body?.text);
    });
  }

  /** An error answer: the Status object's reason and message when there is one. */
  private statusError(method: string, url: string, status: number, body: string): KubeApiError {
    let reason: string | undefined;
    let message = body.trim().slice(0, 500) || http.STATUS_CODES[status] || '';
    try {
      const s = JSON.parse(body) as { kind?: string; reason?: string; message?: string };
      if (s.kind === 'Status') [reason, message] = [s.reason, s.message ?? message];
    } catch {
      // not a Status object: the body as it came
    }
    return new KubeApiError(`${method} ${url}: ${status} ${reason ?? http.STATUS_CODES[status] ?? ''}: ${message}`, status, reason);
  }

  private networkError(method: string, url: string, err: NodeJS.ErrnoException): KubeApiError {
    if (err.code && TLS_TRUST_ERROR.test(err.code)) {
      const against = this.conn.caSource ? `the CA in ${this.conn.caSource}` : 'the system CAs';
      return new KubeApiError(`${method} ${url}: TLS: the server's certificate is not trusted (${err.code}: ${err.message}; checked against ${against})`);
    }
    return new KubeApiError(`${method} ${url}: ${err.message}`);
  }
}

/** An answer's body, at most `limit` bytes: past it the connection is closed and the promise rejects. */
function readBody(res: http.IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let bytes = 0;
    res.on('data', (c: Buffer) => {
      bytes += c.length;
      if (bytes <= limit) return void chunks.push(c);
      chunks.length = 0;
      reject(new Error(`the answer is larger than ${mib(limit)} (the limit): aborted`));
      res.destroy();
    });
    res.on('end', () => resolve(Buffer.concat(chunks).toString()));
    res.on('error', reject);
    res.on('close', () => {
      if (!res.complete) reject(new Error('the connection closed before the whole answer came'));
    });
  });
}
